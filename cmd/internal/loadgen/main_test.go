package loadgen

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the tests start must have ended when they finish.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
