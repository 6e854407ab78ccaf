package tasks

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A panicking task is reported and the others run on; Stop ends the
// context the tasks wait on and returns once every task is done.
func TestStopWaitsForTasksAndPanicsAreReported(t *testing.T) {
	var reported atomic.Value
	g := New(func(task string, v any, _ []byte) { reported.Store(task + ": " + v.(string)) })
	g.Go("bad", func() { panic("boom") })
	var finished atomic.Bool
	g.Go("waits", func() {
		<-g.Context().Done()
		time.Sleep(10 * time.Millisecond) // work after the stop is asked for
		finished.Store(true)
	})
	g.Stop()
	if !finished.Load() {
		t.Fatal("Stop returned before its task finished")
	}
	if got, _ := reported.Load().(string); got != "bad: boom" {
		t.Fatalf("reported %q, want the bad task's panic", got)
	}
}
