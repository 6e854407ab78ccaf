package main

// The sustained run's purge callers run in a process of their own
// (scalesim -purge-callers ADDR), as an operator's or a CI job's callers
// do: their calls and answers do not share a Go scheduler, and two cores,
// with the goroutines of the simulated nodes' sessions.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// callerWorkers bounds the purge calls in flight.
const callerWorkers = 1000

// outcome is one sustained purge call, as the callers' process reports it
// (one JSON line each).
type outcome struct {
	Start    time.Time     `json:"start"`
	Took     time.Duration `json:"took"`
	Rev      int64         `json:"rev"`
	AckP99   time.Duration `json:"ack_p99"` // as the control plane reports it
	Complete bool          `json:"complete"`
	Err      string        `json:"err,omitempty"`
}

// callersDone is the callers' process's last line.
type callersDone struct {
	Sent    int           `json:"sent"`
	Late    int           `json:"late"` // not sent for want of a free caller
	Elapsed time.Duration `json:"elapsed"`
	// Window is how long the purges were being sent: Elapsed less the
	// wait for the last calls to end.
	Window time.Duration `json:"window"`
}

// runCallers is the callers' process: rate purges a second for d against
// the control plane at addr, URL, prefix and tag in turn, each waited for
// by every node (asking for the exceptions only, as a caller that purges
// often does: the answer counts plain acknowledgements instead of listing
// them), paced by the clock; one JSON line per call on out, then
// a callersDone line.
func runCallers(ctx context.Context, addr string, rate int, d time.Duration, out io.Writer) error {
	adm, err := admin.New(admin.Config{Address: addr, Token: "scale-token", Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer adm.Close()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(v)
	}
	jobs := make(chan int, callerWorkers)
	var wg sync.WaitGroup
	for range callerWorkers {
		wg.Go(func() {
			for i := range jobs {
				opts := admin.PurgeOptions{RequestID: fmt.Sprintf("load-%d", i), Wait: 30 * time.Second, ExceptionsOnly: true}
				t0 := time.Now()
				var st *pb.PurgeStatus
				var err error
				switch i % 3 {
				case 0:
					st, err = adm.PurgeURL(ctx, fmt.Sprintf("http://www.example.com/load/%d", i), opts)
				case 1:
					st, err = adm.PurgePrefix(ctx, "www.example.com", fmt.Sprintf("/load/%d/", i), opts)
				default:
					st, err = adm.PurgeTag(ctx, fmt.Sprintf("load-%d", i), opts)
				}
				o := outcome{Start: t0, Took: time.Since(t0), Rev: st.GetPurge().GetRevision(), AckP99: st.GetAckP99().AsDuration(), Complete: st.GetComplete()}
				if err != nil {
					o.Err = err.Error()
				}
				emit(o)
			}
		})
	}
	start := time.Now()
	// Paced by the clock, not by ticks a busy machine drops: each
	// millisecond sends what is due by then.
	tick := time.NewTicker(time.Millisecond)
	sent, late := 0, 0
	for time.Since(start) < d && ctx.Err() == nil {
		<-tick.C
		for due := int(time.Since(start).Seconds() * float64(rate)); sent+late < due; {
			select {
			case jobs <- sent:
				sent++
			default:
				late++ // every caller busy: the rate is not held
			}
		}
	}
	tick.Stop()
	close(jobs)
	window := time.Since(start)
	wg.Wait()
	emit(callersDone{Sent: sent, Late: late, Elapsed: time.Since(start), Window: window})
	return ctx.Err()
}

// callers runs the callers' process for rate purges a second for d and
// hands got each call's outcome as it ends; it returns the process's last
// line.
func (s *sim) callers(ctx context.Context, rate int, d time.Duration, got func(outcome)) (callersDone, error) {
	self, err := os.Executable()
	if err != nil {
		return callersDone{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-purge-callers", s.control, "-purge-rate", fmt.Sprint(rate), "-sustain", d.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return callersDone{}, err
	}
	if err := cmd.Start(); err != nil {
		return callersDone{}, err
	}
	var done callersDone
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var o outcome
		if err := json.Unmarshal(sc.Bytes(), &o); err == nil && !o.Start.IsZero() {
			got(o)
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &done); err != nil {
			return done, fmt.Errorf("the purge callers' line %q: %w", sc.Text(), err)
		}
	}
	if err := cmd.Wait(); err != nil {
		return done, fmt.Errorf("the purge callers' process: %w", err)
	}
	return done, nil
}
