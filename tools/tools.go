//go:build tools

// Package tools pins the version of buf used by make proto and make lint. It
// lives outside go.work because buf needs a protobuf release the other
// modules do not use.
package tools

import _ "github.com/bufbuild/buf/cmd/buf"
