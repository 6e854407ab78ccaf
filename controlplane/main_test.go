package controlplane

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a replica starts must end when Run returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
