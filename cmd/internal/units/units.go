// Package units parses and prints byte sizes for flags: "256MiB", "1GB", "4096".
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// suffixes are matched case-insensitively, longest first: IEC units
// (KiB, and Ki as Kubernetes writes it) are binary, SI units (KB) decimal,
// and a bare K, M, G or T binary, as nginx reads them.
var suffixes = []struct {
	s string
	n int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// Allowed names the units a size may have, for error messages.
const Allowed = "B, KiB, MiB, GiB, TiB (binary; Ki, Mi, Gi, Ti and K, M, G, T too), KB, MB, GB, TB (decimal), in any case"

// ParseBytes parses a size with an optional unit, in any case: "10GiB",
// "512mib", "10gb" (decimal), "10g" or "10Gi" (binary), "4096".
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	lower := strings.ToLower(t)
	mult := int64(1)
	for _, x := range suffixes {
		if strings.HasSuffix(lower, x.s) {
			t, mult = strings.TrimSpace(t[:len(t)-len(x.s)]), x.n
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	// ParseFloat also reads NaN, Inf, hex and exponents: a size is plain
	// digits with an optional fraction.
	if err != nil || n < 0 || strings.TrimLeft(t, "0123456789.") != "" || strings.Count(t, ".") > 1 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit such as 512MiB or 10GB (units: %s)", s, Allowed)
	}
	v := n * float64(mult)
	if v > 1<<62 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// Exact prints a size with the largest binary unit that divides it
// ("8MiB"), or in bytes ("1000"), so that ParseBytes reads back the same
// number.
func Exact(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// Bytes prints a size with a binary unit, e.g. "1.5MiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// Value is a pflag.Value holding a byte size.
type Value struct{ N *int64 }

// String is the size as Bytes writes it; "0" for none, which flag help
// takes for an unset default (the help text names the real default).
func (v Value) String() string {
	if v.N == nil || *v.N == 0 {
		return "0"
	}
	return Bytes(*v.N)
}

// Set parses s into the size.
func (v Value) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*v.N = n
	return nil
}

// Type names the flag's kind in help output.
func (Value) Type() string { return "size" }
