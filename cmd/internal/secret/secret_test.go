package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	t.Setenv("TEST_SECRET", "from-env")
	for _, tt := range []struct {
		name, flag, file, want, err string
	}{
		{name: "flag", flag: "from-flag", want: "from-flag"},
		{name: "file", file: file, want: "from-file"},
		{name: "environment", want: "from-env"},
		{name: "both", flag: "x", file: file, err: "exclusive"},
		{name: "empty file", file: empty, err: "is empty"},
		{name: "missing file", file: filepath.Join(dir, "none"), err: "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve("join-token", tt.flag, tt.file, "TEST_SECRET")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
