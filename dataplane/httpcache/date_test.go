package httpcache

import (
	"testing"
	"time"
)

func TestParseDateTakesTheThreeFormsOnly(t *testing.T) {
	want := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	for _, v := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
		"Sunday, 06-Nov-94 08:49:37 GMT", // rfc850
		"Sun Nov  6 08:49:37 1994",       // asctime
		"sun, 06 nov 1994 08:49:37 gmt",  // cache recipients match case-insensitively (RFC 9111 4.2)
		"SUNDAY, 06-NOV-94 08:49:37 GMT",
	} {
		if got, ok := ParseDate(v); !ok || !got.Equal(want) {
			t.Errorf("ParseDate(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{
		"Sun,  06 Nov 1994 08:49:37 GMT", // two spaces
		"Sun, 06 Nov 1994 8:49:37 GMT",   // one-digit hour
		"Sun, 6 Nov 1994 08:49:37 GMT",   // one-digit day
		"Sun, 06 Nov 1994 08:49:37 UTC",  // not GMT
		"Sun, 06 Nov 1994 08:49:37 +0000",
		"Mon, 06 Nov 1994 08:49:37 GMT", // not that date's day
		"Sun, 31 Nov 1994 08:49:37 GMT", // no such date
		"Sun, 06 Nov 1994 24:00:00 GMT",
		"Sun, 06 Nov 1994 08:49:37 GMT ",
		"Sun, 06 Nov 1994\r\n 08:49:37 GMT", // folded over lines
		"Sun Nov 6 08:49:37 1994",           // asctime without the pad
		"Sunday, 06-Nov-1994 08:49:37 GMT",  // rfc850 with four digits
		"1994-11-06T08:49:37Z",
		"0",
		"",
	} {
		if got, ok := ParseDate(v); ok {
			t.Errorf("ParseDate(%q) = %v; want invalid", v, got)
		}
	}
}

// A two-digit year more than 50 years ahead is in the past century.
func TestParseDateReadsTwoDigitYearsWithinFiftyYears(t *testing.T) {
	next := time.Now().AddDate(1, 0, 0).UTC().Truncate(time.Second)
	v := next.Format("Monday, 02-Jan-06 15:04:05 GMT")
	if got, ok := ParseDate(v); !ok || !got.Equal(next) {
		t.Fatalf("ParseDate(%q) = %v, %v; want %v", v, got, ok, next)
	}
	far := time.Date(2094, 11, 7, 8, 0, 0, 0, time.UTC) // "94": 1994, not 2094
	v = far.AddDate(-100, 0, 0).Format("Monday, 02-Jan-06 15:04:05 GMT")
	if got, ok := ParseDate(v); !ok || got.Year() != 1994 {
		t.Fatalf("ParseDate(%q) = %v, %v; want 1994", v, got, ok)
	}
}

func FuzzParseDate(f *testing.F) {
	for _, s := range []string{"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", ", 00-000-00 00:00:00 gmt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseDate(v)
		if ok && d.Location() != time.UTC {
			t.Fatalf("ParseDate(%q) = %v, not UTC", v, d)
		}
	})
}
