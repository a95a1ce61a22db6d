package main

import (
	"testing"
)

func TestParseScript(t *testing.T) {
	tests := []struct {
		in      string
		want    []string // method:code in order
		wantErr bool
	}{
		{"", nil, false},
		{"ControllerUnpublishVolume=Unavailable,OK,Internal", []string{"ControllerUnpublishVolume:Unavailable", "ControllerUnpublishVolume:OK", "ControllerUnpublishVolume:Internal"}, false},
		{"A=Aborted; B=NotFound", []string{"A:Aborted", "B:NotFound"}, false},
		{"NoCodes=", nil, true},
		{"=Unavailable", nil, true},
		{"JustAMethod", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			rules, err := ParseScript(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			var got []string
			for _, r := range rules {
				if r.Count != 1 {
					t.Errorf("rule %+v: Count %d, want 1 (each scripted code is used once)", r, r.Count)
				}
				got = append(got, r.Method+":"+r.Code)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}
