package testutil

import (
	"reflect"
	"time"
)

// Fill sets every exported field reachable from v to a non-zero value
// (times to now, strings to "s-" and their type's name, a slice or map to
// one filled element): a test that compares two encodings of a filled
// value fails when a field is added to the type and one of them misses it.
func Fill(v reflect.Value, now time.Time) {
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(now))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		Fill(v.Elem(), now)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				Fill(v.Field(i), now)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		Fill(v.Index(0), now)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		Fill(k, now)
		Fill(e, now)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s-" + v.Type().Name())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(9)
	}
}
