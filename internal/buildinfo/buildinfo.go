// Package buildinfo carries the version stamped at build time.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set with -ldflags "-X github.com/erpsync/erpsync/internal/buildinfo.Version=v1.2.3".
var Version = "dev"

// String describes the binary: version, commit (when built from git) and Go.
func String() string {
	commit, modified := "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	return fmt.Sprintf("erpsync %s commit %s%s %s %s/%s", Version, commit, modified, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
