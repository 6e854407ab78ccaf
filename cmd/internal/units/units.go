// Package units parses and prints byte sizes for flags: "256MiB", "1GB", "4096".
package units

import (
	"fmt"
	"strconv"
	"strings"
)

var suffixes = []struct {
	s string
	n int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseBytes parses a size with an optional unit (binary KiB..TiB, decimal
// KB..TB, or K/M/G/T as binary like nginx).
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, x := range suffixes {
		if strings.HasSuffix(t, x.s) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, x.s)), x.n
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	// ParseFloat also reads NaN, Inf, hex and exponents: a size is plain
	// digits with an optional fraction.
	if err != nil || n < 0 || strings.TrimLeft(t, "0123456789.") != "" || strings.Count(t, ".") > 1 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit such as 256MiB", s)
	}
	v := n * float64(mult)
	if v > 1<<62 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
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
