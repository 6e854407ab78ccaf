package units

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"4096", 4096, false},
		{"256MiB", 256 << 20, false},
		{"1GB", 1e9, false},
		{"1.5K", 1536, false},
		{" 2 GiB ", 2 << 30, false},
		{"10GiB", 10 << 30, false},
		{"512MiB", 512 << 20, false},
		{"512mib", 512 << 20, false},
		{"10gb", 10e9, false},
		{"10GB", 10e9, false},
		{"10g", 10 << 30, false},
		{"10G", 10 << 30, false},
		{"10Gi", 10 << 30, false},
		{"64ki", 64 << 10, false},
		{"100b", 100, false},
		{"10 gigs", 0, true},
		{"GiB", 0, true},
		{"-1", 0, true},
		{"lots", 0, true},
		{"NaN", 0, true},
		{"NaNGiB", 0, true},
		{"Inf", 0, true},
		{"1e3", 0, true},
		{"0x10", 0, true},
		{"1.2.3", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseBytes(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseBytes(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestBytes(t *testing.T) {
	for in, want := range map[int64]string{100: "100B", 1536: "1.5KiB", 256 << 20: "256.0MiB", 3 << 30: "3.0GiB"} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", in, got, want)
		}
	}
}

// An unset size flag's help carries no "(default 0B)" beside the default
// its text names.
func TestUnsetSizeFlagShowsNoZeroDefault(t *testing.T) {
	var n int64
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Var(Value{N: &n}, "disk", "disk budget (default 10GiB)")
	if usage := fs.FlagUsages(); strings.Contains(usage, "0B") || strings.Count(usage, "default") != 1 {
		t.Fatalf("usage %q: want the text's one default", usage)
	}
	n = 1 << 30
	if got := (Value{N: &n}).String(); got != "1.0GiB" {
		t.Fatalf("String() = %q, want 1.0GiB", got)
	}
}

func TestExactReadsBack(t *testing.T) {
	for _, n := range []int64{0, 1, 1000, 1024, 1536, 8 << 20, 3 << 30, 5 << 40} {
		got, err := ParseBytes(Exact(n))
		if err != nil || got != n {
			t.Errorf("ParseBytes(Exact(%d) = %q) = %d, %v", n, Exact(n), got, err)
		}
	}
	if Exact(8<<20) != "8MiB" || Exact(1000) != "1000" {
		t.Fatalf("Exact: %q %q", Exact(8<<20), Exact(1000))
	}
}
