// Package jsonindent indents compact JSON, the way encoding/json writes
// it, into exactly what json.Indent writes, in one pass without
// json.Indent's validating scanner. The API indents every answer (its
// format since the first release); json.Indent's scanner made that
// indentation two thirds of the CPU of a page of 1,000 events, the one
// route the web UI polls that costs CPU at any table size (BENCHMARKS
// "Indenting the API's JSON"). Anything but compact JSON (white space
// between tokens) is handed to json.Indent, so the output never differs
// from it (FuzzAppendMatchesIndent).
package jsonindent

import (
	"bytes"
	"encoding/json"
)

// Append appends src, one compact JSON value, indented with prefix ""
// and indent as json.Indent would, to dst. src is trusted to be valid:
// its writer is encoding/json (json.Indent's error for an invalid value is
// not reproduced; the result is then unspecified, but never a panic).
func Append(dst, src []byte, indent string) []byte {
	start := len(dst)
	depth := 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '"':
			// Copy the string whole: up to its closing quote, stepping over
			// each escaped character.
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j, len(src)-1)
			dst = append(dst, src[i:j+1]...)
			i = j
		case '{', '[':
			dst = append(dst, c)
			if i+1 < len(src) && (src[i+1] == '}' || src[i+1] == ']') {
				dst = append(dst, src[i+1]) // {} and [] stay on one line
				i++
				continue
			}
			depth++
			dst = newline(dst, indent, depth)
		case '}', ']':
			depth--
			dst = newline(dst, indent, depth)
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			dst = newline(dst, indent, depth)
		case ':':
			dst = append(dst, ':', ' ')
		case ' ', '\t', '\n', '\r':
			// Not compact: json.Indent knows what to keep.
			var b bytes.Buffer
			if err := json.Indent(&b, src, "", indent); err != nil {
				return append(dst[:start], src...)
			}
			return append(dst[:start], b.Bytes()...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func newline(dst []byte, indent string, depth int) []byte {
	dst = append(dst, '\n')
	for range depth {
		dst = append(dst, indent...)
	}
	return dst
}
