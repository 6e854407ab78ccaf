package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// S2 in steady state: S2's workload over a key space small enough that a
// long warm-up asks for nearly every key, so that the measured requests
// see few first-time keys and the hit ratio says how well each system
// chooses what to keep. Request counts, not durations, so that a slower
// system is not charged more cold misses.
const (
	steadyKeys    = 20000
	steadyWarm    = 200000
	steadyMeasure = 100000
	// steadyMemory is a fifth of the key space, spread over the instances.
	steadyMemory = steadyKeys * 16 << 10 / 5 / instances
)

// warmed is a scenario measured after a warm-up with the same workload:
// what a system costs once its caches are full and evicting, rather than
// while it fills them from cold as in S2.
type warmed struct {
	keys, warm, measure int
	dist                string
	memory              int64
	bound               bool // the ideal bound of a Zipf s=1.0 cache (S2s)
}

func (w warmed) counts(r *runner) (warm, measure int) {
	if r.quick {
		return w.warm / 10, w.measure / 10
	}
	return w.warm, w.measure
}

var steady = warmed{keys: steadyKeys, warm: steadyWarm, measure: steadyMeasure, dist: "zipf:1.0", memory: steadyMemory, bound: true}

var steadyScenario = scenario{
	id: "S2s", title: "S2 in steady state",
	workload: func(r *runner) string {
		w, m := steady.counts(r)
		return fmt.Sprintf("Zipf s=1.0 over %d keys × 16 KiB, %d warm-up requests, then %d measured, 16 clients; total cache memory ≈ 20 %% of the key space (%s per instance); "+
			"objects/node sampled every second of the measured requests; hit ratio read from the answers (X-Cache), origin offload from the origin's count (1 − origin requests ÷ requests); "+
			"ideal bound: the popularity share of the N most popular keys (N the objects held), less their first-time requests in the measured window: the origin offload of a cache that holds exactly those",
			steadyKeys, w, m, mib(steadyMemory))
	},
	metrics: []string{"hit ratio", "origin offload", "ideal bound", "objects/node", "p99 ms", "req/s", "CPU µs/req"},
	run:     steady.run,
}

// S2's workload and budget, warmed with as many requests as S2 measures;
// and a workload of misses only (uniform over more keys than it asks
// for) once the caches are full. Neither is in the default list: they say
// where S2's cost from cold comes from (-scenarios S2w,S2m).
var (
	s2Warmed = warmed{keys: 100000, warm: 150000, measure: 150000, dist: "zipf:1.0", memory: s2Memory}
	s2Misses = warmed{keys: 5000000, warm: 30000, measure: 60000, dist: "uniform", memory: s2Memory}
)

var (
	s2WarmedScenario = s2Warmed.scenario("S2w", "S2 warmed",
		"S2's workload (Zipf s=1.0 over %d keys × 16 KiB, 16 clients, %s per instance): %d warm-up requests, then %d measured; objects/node sampled every second of the measured requests")
	s2MissesScenario = s2Misses.scenario("S2m", "misses once the caches are full",
		"Uniform over %d keys × 16 KiB, 16 clients, %s per instance: %d warm-up requests (more than the caches hold), then %d measured, nearly all misses: the cost of a fill that evicts")
)

// scenario is the warmed workload as a scenario; workload is its
// description, given the keys, the memory per instance and the request
// counts.
func (spec warmed) scenario(id, title, workload string) scenario {
	return scenario{
		id: id, title: title,
		workload: func(r *runner) string {
			w, m := spec.counts(r)
			return fmt.Sprintf(workload, spec.keys, mib(spec.memory), w, m)
		},
		metrics: []string{"hit ratio", "origin offload", "objects/node", "p99 ms", "req/s", "CPU µs/req"},
		run:     spec.run,
	}
}

func (spec warmed) run(ctx context.Context, r *runner) ([]measurement, error) {
	var out []measurement
	warm, measure := spec.counts(r)
	for _, sys := range systems {
		fmt.Fprintf(r.log, "   %s\n", sys.name)
		err := withSystem(ctx, r, sys, spec.memory, func(in *instance) error {
			load := func(n, seed int) (*loadResult, error) {
				return r.load(ctx, in.targets, "--dist", spec.dist, "--keys", strconv.Itoa(spec.keys), "--size", "16KiB", "-c", "16",
					"-n", strconv.Itoa(n), "-d", "0", "--seed", strconv.Itoa(seed))
			}
			if _, err := load(warm, 41); err != nil {
				return err
			}
			o0, err := r.originRequests()
			if err != nil {
				return err
			}
			u0 := usageOf(in.serving)
			held := sampleObjects(ctx, sys, in)
			res, err := load(measure, 42)
			perNode := held()
			if err != nil {
				return err
			}
			cpu, _ := usageOf(in.serving).perRequest(u0, res.Requests)
			o1, err := r.originRequests()
			if err != nil {
				return err
			}
			off := -1.0
			if res.Requests > 0 {
				off = offload(o1-o0, res.Requests)
			}
			m := measurement{System: sys.name, OriginReqs: o1 - o0, Offload: off, HitRatio: res.HitRatio, IdealBound: math.NaN(),
				P50: res.LatencyMs.P50, P99: res.LatencyMs.P99, ReqPerSec: res.PerSecond, CPUPerReqUs: cpu,
				Errors: sumErrors(res), Runs: 1, ObjsPerNode: perNode, Note: errorKinds(res)}
			if spec.bound && perNode > 0 {
				m.IdealBound = zipfBound(spec.keys, int(perNode*float64(len(in.targets))), warm, measure)
				m.Note = fmt.Sprintf("bound %.3f for %.0f objects held in all; %s", m.IdealBound, perNode*float64(len(in.targets)), m.Note)
			}
			out = append(out, m)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sampleObjects reads sys's objects per node every second until the
// returned function is called, which returns their mean (-1 if none
// could be read): nginx's cache manager trims only now and then, so one
// reading at the end says little.
func sampleObjects(ctx context.Context, sys system, in *instance) func() float64 {
	var mu sync.Mutex
	var samples []float64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if v := objectsPerNode(ctx, sys, in); v >= 0 {
				mu.Lock()
				samples = append(samples, v)
				mu.Unlock()
			}
		}
	}()
	return func() float64 {
		close(stop)
		<-done
		if v := objectsPerNode(ctx, sys, in); v >= 0 {
			samples = append(samples, v)
		}
		if len(samples) == 0 {
			return -1
		}
		var sum float64
		for _, v := range samples {
			sum += v
		}
		return sum / float64(len(samples))
	}
}

// zipfBound is the hit ratio of a cache that holds exactly the held most
// popular of keys keys under Zipf s=1.0, over measure requests after warm
// ones: their popularity share, less the expected first-time requests of
// those keys in the measured window (a key first asked for then is a miss
// whatever the cache holds).
func zipfBound(keys, held, warm, measure int) float64 {
	held = min(held, keys)
	var h float64
	for k := 1; k <= keys; k++ {
		h += 1 / float64(k)
	}
	var share, first float64
	for k := 1; k <= held; k++ {
		p := 1 / float64(k) / h
		share += p
		first += math.Pow(1-p, float64(warm)) * (1 - math.Pow(1-p, float64(measure)))
	}
	return share - first/float64(measure)
}
