package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestRead(t *testing.T) {
	build := func(main string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: main}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name, stamp     string
		read            func() (*debug.BuildInfo, bool)
		version, commit string
	}{
		{"stamped wins", "v0.3.0-4-gabc1234", build("v0.2.0", "vcs.revision", "abc1234"), "v0.3.0-4-gabc1234", "abc1234"},
		{"module version", "", build("v0.2.0"), "v0.2.0", ""},
		{"checkout", "", build("(devel)", "vcs.revision", "abc1234"), "abc1234", "abc1234"},
		{"modified checkout", "", build("(devel)", "vcs.revision", "abc1234", "vcs.modified", "true"), "abc1234-dirty", "abc1234-dirty"},
		{"go test: no VCS", "", build("(devel)"), "(devel)", ""},
		{"no build info", "", none, "unknown", ""},
		{"no build info, stamped", "v1.0.0", none, "v1.0.0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := read(tc.stamp, tc.read)
			if in.Version != tc.version || in.Revision != tc.commit || in.GoVersion == "" {
				t.Fatalf("read = %+v, want version %q revision %q", in, tc.version, tc.commit)
			}
		})
	}
}

// Under go test the program has build information: Read never says
// "unknown", and always names the Go version.
func TestReadInTest(t *testing.T) {
	in := Read()
	if in.Version == "" || in.Version == "unknown" || in.GoVersion == "" {
		t.Fatalf("Read() = %+v", in)
	}
}
