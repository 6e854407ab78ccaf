package httpcache

import (
	"strings"
	"time"
)

// ParseDate parses an HTTP-date strictly (RFC 9110 5.6.7): the preferred
// IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") or the obsolete rfc850
// ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime ("Sun Nov  6 08:49:37
// 1994") forms, each exactly as the grammar has it: single spaces,
// two-digit fields (asctime's day may be a space and one digit), GMT, and a
// day name that is the date's. Names are matched without regard to case,
// as RFC 9111 4.2 asks of caches. Anything else (a run of spaces, a
// one-digit hour, another zone, a date that does not exist) is invalid.
func ParseDate(v string) (time.Time, bool) {
	v = strings.ToLower(v)
	switch {
	case len(v) == 29 && v[3] == ',': // sun, 06 nov 1994 08:49:37 gmt
		if v[4] != ' ' || v[7] != ' ' || v[11] != ' ' || v[16] != ' ' || v[25] != ' ' || v[26:] != "gmt" {
			return time.Time{}, false
		}
		day, ok1 := dateDigits(v[5:7])
		year, ok2 := dateDigits(v[12:16])
		return build(v[:3], shortDays, day, v[8:11], year, v[17:25], ok1 && ok2)
	case len(v) == 24 && v[3] == ' ': // sun nov  6 08:49:37 1994
		if v[7] != ' ' || v[10] != ' ' || v[19] != ' ' {
			return time.Time{}, false
		}
		d := v[8:10]
		if d[0] == ' ' {
			d = "0" + d[1:]
		}
		day, ok1 := dateDigits(d)
		year, ok2 := dateDigits(v[20:24])
		return build(v[:3], shortDays, day, v[4:7], year, v[11:19], ok1 && ok2)
	}
	// sunday, 06-nov-94 08:49:37 gmt
	i := strings.IndexByte(v, ',')
	if i < 0 || len(v) != i+24 {
		return time.Time{}, false
	}
	r := v[i:]
	if r[1] != ' ' || r[4] != '-' || r[8] != '-' || r[11] != ' ' || r[20] != ' ' || r[21:] != "gmt" {
		return time.Time{}, false
	}
	day, ok1 := dateDigits(r[2:4])
	yy, ok2 := dateDigits(r[9:11])
	t, ok := build(v[:i], longDays, day, r[5:8], 2000+yy, r[12:20], ok1 && ok2)
	if !ok {
		// The day name was checked against the 20xx date; try 19xx.
		t, ok = build(v[:i], longDays, day, r[5:8], 1900+yy, r[12:20], ok1 && ok2)
		return t, ok
	}
	// RFC 9110 5.6.7: a two-digit year more than 50 years in the future is
	// the most recent past year with the same last two digits.
	if t.After(time.Now().AddDate(50, 0, 0)) {
		return build(v[:i], longDays, day, r[5:8], 1900+yy, r[12:20], true)
	}
	return t, true
}

var (
	shortDays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
	longDays  = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}
	months    = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
)

// dateDigits parses a run of ASCII digits, nothing else.
func dateDigits(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// build makes the date from its parts, checking each: the month name, the
// time "hh:mm:ss", that the day exists in the month, and that dayName is
// its weekday's.
func build(dayName string, days []string, day int, month string, year int, hms string, ok bool) (time.Time, bool) {
	m := 0
	for i, name := range months {
		if name == month {
			m = i + 1
		}
	}
	if !ok || m == 0 || len(hms) != 8 || hms[2] != ':' || hms[5] != ':' {
		return time.Time{}, false
	}
	hh, ok1 := dateDigits(hms[:2])
	mm, ok2 := dateDigits(hms[3:5])
	ss, ok3 := dateDigits(hms[6:])
	if !ok1 || !ok2 || !ok3 || hh > 23 || mm > 59 || ss > 60 || day < 1 || day > 31 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(m), day, hh, mm, min(ss, 59), 0, time.UTC)
	if t.Day() != day || days[t.Weekday()] != dayName {
		return time.Time{}, false
	}
	return t, true
}
