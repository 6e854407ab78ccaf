package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config describes one load run.
type Config struct {
	// Targets are the base URLs requests are spread over, round-robin.
	Targets []string
	// Path is the request path template; {key} and {size} are replaced.
	// Default "/obj/{key}?size={size}".
	Path string
	// Concurrency is the number of clients, each with its own keep-alive
	// connection per target. Default 16.
	Concurrency int
	// Duration ends the run after this long; Requests after this many
	// requests. One of them is required; the first reached ends the run.
	Duration time.Duration
	Requests int64
	Keys     Keys
	Sizes    Sizes
	// Timeout bounds one request. Default 30s.
	Timeout time.Duration
	// Seed makes the key sequence reproducible. 0 picks one at random.
	Seed uint64
}

// Result is what a run measured.
type Result struct {
	Requests  int64             `json:"requests"`
	Seconds   float64           `json:"seconds"`
	PerSecond float64           `json:"requests_per_second"`
	Bytes     int64             `json:"bytes"`
	LatencyMs Latency           `json:"latency_ms"`
	Cache     map[string]int64  `json:"x_cache"`
	HitRatio  float64           `json:"hit_ratio"`
	Errors    map[string]int64  `json:"errors"`
	Statuses  map[string]int64  `json:"statuses"`
	Histogram *Histogram        `json:"-"`
	Targets   []string          `json:"targets"`
	Extra     map[string]string `json:"extra,omitempty"`
}

// Latency holds percentiles in milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Progress is a live view of a running load.
type Progress struct {
	Elapsed  time.Duration
	Requests int64
	Errors   int64
}

func (c *Config) check() error {
	if len(c.Targets) == 0 {
		return errors.New("no target URL")
	}
	for _, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("target %q: want an http:// or https:// URL", t)
		}
	}
	if c.Path == "" {
		c.Path = "/obj/{key}?size={size}"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("concurrency %d: want at least 1", c.Concurrency)
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		return errors.New("give a duration or a request count")
	}
	if c.Keys == nil || c.Sizes == nil {
		return errors.New("key distribution and object size are required")
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return nil
}

// worker is one client's tallies, merged at the end.
type worker struct {
	hist     Histogram
	bytes    int64
	cache    map[string]int64
	errors   map[string]int64
	statuses map[string]int64
}

// Run drives load until the duration or request count is reached or ctx
// ends, calling progress about every second.
func Run(ctx context.Context, cfg Config, progress func(Progress)) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Concurrency * len(cfg.Targets),
		MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout}

	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	var issued, done, failed atomic.Int64
	workers := make([]*worker, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		w := &worker{cache: map[string]int64{}, errors: map[string]int64{}, statuses: map[string]int64{}}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			buf := make([]byte, 64<<10)
			for j := i; ctx.Err() == nil; j++ {
				if cfg.Requests > 0 && issued.Add(1) > cfg.Requests {
					return
				}
				key := cfg.Keys.Next(r)
				target := cfg.Targets[j%len(cfg.Targets)]
				path := strings.NewReplacer("{key}", strconv.Itoa(key), "{size}", strconv.FormatInt(cfg.Sizes.Size(key), 10)).Replace(cfg.Path)
				t0 := time.Now()
				kind := w.do(ctx, client, target+path, buf)
				if kind == "canceled" {
					return // the run ended while this request was in flight
				}
				w.hist.Record(time.Since(t0))
				done.Add(1)
				if kind != "" {
					w.errors[kind]++
					failed.Add(1)
				}
			}
		}()
	}
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				if progress != nil {
					progress(Progress{Elapsed: time.Since(start), Requests: done.Load(), Errors: failed.Load()})
				}
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	<-progressDone

	res := &Result{Cache: map[string]int64{}, Errors: map[string]int64{}, Statuses: map[string]int64{}, Histogram: &Histogram{}, Targets: cfg.Targets}
	for _, w := range workers {
		res.Histogram.Merge(&w.hist)
		res.Bytes += w.bytes
		for k, v := range w.cache {
			res.Cache[k] += v
		}
		for k, v := range w.errors {
			res.Errors[k] += v
		}
		for k, v := range w.statuses {
			res.Statuses[k] += v
		}
	}
	res.Requests = int64(res.Histogram.Count())
	res.Seconds = elapsed.Seconds()
	if res.Seconds > 0 {
		res.PerSecond = float64(res.Requests) / res.Seconds
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	h := res.Histogram
	res.LatencyMs = Latency{P50: ms(h.Quantile(.5)), P90: ms(h.Quantile(.9)), P99: ms(h.Quantile(.99)), Max: ms(h.Max())}
	var hits, withCache int64
	for k, v := range res.Cache {
		withCache += v
		if k == "HIT" {
			hits += v
		}
	}
	if withCache > 0 {
		res.HitRatio = float64(hits) / float64(withCache)
	}
	return res, nil
}

// do sends one request and reads the whole body. It returns "" on success,
// else the kind of error.
func (w *worker) do(ctx context.Context, client *http.Client, u string, buf []byte) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "request"
	}
	resp, err := client.Do(req)
	if err != nil {
		return errorKind(ctx, err)
	}
	defer resp.Body.Close()
	n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	w.bytes += n
	if err != nil {
		return errorKind(ctx, err)
	}
	w.statuses[strconv.Itoa(resp.StatusCode)]++
	if c := resp.Header.Get("X-Cache"); c != "" {
		w.cache[strings.ToUpper(strings.Fields(c)[0])]++
	} else {
		w.cache["none"]++
	}
	switch {
	case resp.StatusCode >= 500:
		return "status 5xx"
	case resp.StatusCode >= 400:
		return "status 4xx"
	case resp.ContentLength >= 0 && n != resp.ContentLength:
		return "short body"
	}
	return ""
}

// errorKind names a transport error for the error table.
func errorKind(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection reset"
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	return "other"
}
