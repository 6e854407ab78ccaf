package httpcache

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestParseRange(t *testing.T) {
	const size = 1000
	tests := []struct {
		field string
		want  []ByteRange
		err   error
	}{
		{"bytes=0-499", []ByteRange{{0, 500}}, nil},
		{"bytes=500-", []ByteRange{{500, 500}}, nil},
		{"bytes=-200", []ByteRange{{800, 200}}, nil},
		{"bytes=-2000", []ByteRange{{0, 1000}}, nil},
		{"bytes=990-2000", []ByteRange{{990, 10}}, nil},
		{"bytes=0-0,-1", []ByteRange{{0, 1}, {999, 1}}, nil},
		{"BYTES = 1-2 , 5-6", []ByteRange{{1, 2}, {5, 2}}, nil},
		{"bytes=0-1,,4-5", []ByteRange{{0, 2}, {4, 2}}, nil},
		{"bytes=1000-", nil, ErrRangeUnsatisfiable},
		{"bytes=1000-2000,2000-", nil, ErrRangeUnsatisfiable},
		{"bytes=-0", nil, ErrRangeUnsatisfiable},
		{"bytes=1000-1001,5-6", []ByteRange{{5, 2}}, nil}, // the satisfiable one
		{"bytes=5-4", nil, ErrRangeInvalid},
		{"bytes=a-b", nil, ErrRangeInvalid},
		{"bytes=-", nil, ErrRangeInvalid},
		{"bytes=+1-2", nil, ErrRangeInvalid},
		{"bytes=1", nil, ErrRangeInvalid},
		{"bytes=", nil, ErrRangeInvalid},
		{"items=0-1", nil, ErrRangeInvalid},
		{"bytes=99999999999999999999-", nil, ErrRangeInvalid},
	}
	for _, tt := range tests {
		got, err := ParseRange(tt.field, size)
		if !errors.Is(err, tt.err) || !slices.Equal(got, tt.want) {
			t.Errorf("ParseRange(%q) = %v, %v; want %v, %v", tt.field, got, err, tt.want, tt.err)
		}
	}
	many := "bytes=0-0" + string(bytes.Repeat([]byte(",0-0"), MaxRanges))
	if _, err := ParseRange(many, size); !errors.Is(err, ErrRangeInvalid) {
		t.Errorf("%d ranges: %v, want them ignored", MaxRanges+1, err)
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-499", "bytes=-5", "bytes=5-", "bytes=1-2,3-4,-1", "bytes=,", "bytes=9-1", "x"} {
		f.Add(s, int64(1000))
	}
	f.Fuzz(func(t *testing.T, field string, size int64) {
		if size < 0 {
			size = -size
		}
		ranges, err := ParseRange(field, size)
		if err != nil {
			if ranges != nil {
				t.Fatalf("%q: ranges %v with error %v", field, ranges, err)
			}
			return
		}
		if len(ranges) == 0 || len(ranges) > MaxRanges {
			t.Fatalf("%q: %d ranges", field, len(ranges))
		}
		for _, r := range ranges {
			if r.Start < 0 || r.Length <= 0 || r.Start+r.Length > size || r.Start+r.Length < r.Start {
				t.Fatalf("%q on %d bytes: range %+v outside the representation", field, size, r)
			}
		}
	})
}

func TestParseContentRange(t *testing.T) {
	for _, tt := range []struct {
		v                 string
		start, end, total int64
		ok                bool
	}{
		{"bytes 0-99/1000", 0, 99, 1000, true},
		{"bytes 10-19/*", 10, 19, -1, true},
		{"bytes 10-19/15", 0, 0, 0, false},
		{"bytes 20-19/100", 0, 0, 0, false},
		{"bytes */100", 0, 0, 0, false},
		{"bits 0-1/2", 0, 0, 0, false},
		{"bytes -1-5/9", 0, 0, 0, false},
	} {
		start, end, total, ok := ParseContentRange(tt.v)
		if ok != tt.ok || ok && (start != tt.start || end != tt.end || total != tt.total) {
			t.Errorf("ParseContentRange(%q) = %d %d %d %v", tt.v, start, end, total, ok)
		}
	}
}
