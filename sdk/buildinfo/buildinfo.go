// Package buildinfo says which build of shardcache a process runs: the
// version stamped at link time (make build sets it from git describe), or
// else what the Go toolchain recorded (the module version, or the VCS
// revision of a checkout), and the Go version. Every process reports it:
// `version` commands, the shardcache_build_info metric, and the version
// field of a node's member record.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// version is set at link time:
//
//	go build -ldflags "-X github.com/shardcache/shardcache/sdk/buildinfo.version=v1.2.3"
//
// Empty means: take it from the build information.
var version string

// Info is one program's build.
type Info struct {
	// Version is the stamped version, else the module version, else the
	// VCS revision (with "-dirty" for a modified tree), else "(devel)".
	Version string `json:"version"`
	// Revision is the VCS revision the binary was built from, when known.
	Revision string `json:"revision,omitempty"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"go_version"`
}

// Read returns this program's build.
func Read() Info {
	return read(version, debug.ReadBuildInfo)
}

// read is Read with the stamp and the build information passed in.
func read(stamped string, readBuild func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: stamped, GoVersion: runtime.Version()}
	bi, ok := readBuild()
	if !ok {
		if in.Version == "" {
			in.Version = "unknown"
		}
		return in
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	in.Revision = settings["vcs.revision"]
	if in.Revision != "" && settings["vcs.modified"] == "true" {
		in.Revision += "-dirty"
	}
	if in.Version != "" {
		return in
	}
	switch v := bi.Main.Version; {
	case v != "" && v != "(devel)":
		in.Version = v
	case in.Revision != "":
		in.Version = in.Revision
	default:
		in.Version = "(devel)"
	}
	return in
}
