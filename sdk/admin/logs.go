package admin

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/logquery"
)

// LogFilter selects the access-log records a stream carries; zero fields
// select everything.
type LogFilter struct {
	Host        string        // exact, without port
	PathPrefix  string        // of the request URI
	Status      string        // a status ("404") or a class ("5xx")
	Cache       string        // X-Cache value, e.g. MISS
	Route       string        // local, relayed, bypass, redirect, sliced...
	MinDuration time.Duration // at least this long
	// Expr is a filter expression (package logquery, over LogFields):
	// status >= 500 and route == relayed and duration > 100ms.
	Expr string
	// Full asks for full records (LogRecord.Full): the request's and the
	// answer's fields, the stages' times, the requests made for it.
	Full bool

	query *logquery.Query // Expr, parsed by ParseLogFilter
}

// Query is f as the node's /log query parameters.
func (f LogFilter) Query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("host", f.Host)
	set("path_prefix", f.PathPrefix)
	set("status", f.Status)
	set("cache", f.Cache)
	set("route", f.Route)
	if f.MinDuration > 0 {
		q.Set("min_duration", f.MinDuration.String())
	}
	set("q", f.Expr)
	if f.Full {
		q.Set("full", "1")
	}
	return q
}

// ParseLogFilter reads a filter from /log's query parameters, refusing one
// that cannot match anything with the reason.
func ParseLogFilter(q url.Values) (LogFilter, error) {
	f := LogFilter{Host: strings.ToLower(q.Get("host")), PathPrefix: q.Get("path_prefix"), Status: strings.ToLower(q.Get("status")),
		Cache: strings.ToUpper(q.Get("cache")), Route: strings.ToLower(q.Get("route"))}
	if err := f.checkStatus(); err != nil {
		return f, err
	}
	if v := q.Get("min_duration"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return f, fmt.Errorf("%w: min duration %q: want a duration such as 100ms", ErrInvalid, v)
		}
		f.MinDuration = d
	}
	if f.PathPrefix != "" && !strings.HasPrefix(f.PathPrefix, "/") {
		return f, fmt.Errorf("%w: path prefix %q: want one starting with /", ErrInvalid, f.PathPrefix)
	}
	switch v := q.Get("full"); v {
	case "", "0":
	case "1":
		f.Full = true
	default:
		return f, fmt.Errorf("%w: full %q: want 1 or 0", ErrInvalid, v)
	}
	f.Expr = q.Get("q")
	query, err := ParseLogQuery(f.Expr)
	if err != nil {
		return f, fmt.Errorf("%w: filter: %v", ErrInvalid, err)
	}
	f.query = query
	return f, nil
}

// ParseLogQuery parses a filter expression over LogFields ("" is none).
func ParseLogQuery(s string) (*logquery.Query, error) { return logquery.Parse(s, LogFields) }

// NeedsFull reports whether the records f selects must be full: it asks
// for them, or its query reads what only they carry.
func (f LogFilter) NeedsFull() bool { return f.Full || f.query.Full() }

// Match reports whether r passes f (as ParseLogFilter made it).
func (f LogFilter) Match(r *LogRecord) bool {
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.Contains(h, "]") {
		host = h
	}
	return (f.Host == "" || strings.EqualFold(host, f.Host)) && strings.HasPrefix(r.Path, f.PathPrefix) && f.MatchStatus(r.Status) &&
		(f.Cache == "" || r.Cache == f.Cache) && (f.Route == "" || r.Route == f.Route) &&
		(f.MinDuration == 0 || r.DurationMS >= float64(f.MinDuration)/float64(time.Millisecond)) && f.query.Match(r)
}

func (f LogFilter) checkStatus() error {
	s := f.Status
	switch {
	case s == "":
		return nil
	case len(s) == 3 && s[1:] == "xx" && s[0] >= '1' && s[0] <= '5':
		return nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 100 && n <= 599 {
		return nil
	}
	return fmt.Errorf("%w: status %q: want a status (100 to 599) or a class (1xx to 5xx)", ErrInvalid, s)
}

// MatchStatus reports whether status passes f's status filter.
func (f LogFilter) MatchStatus(status int) bool {
	switch {
	case f.Status == "":
		return true
	case strings.HasSuffix(f.Status, "xx"):
		return status/100 == int(f.Status[0]-'0')
	}
	return strconv.Itoa(status) == f.Status
}

// StreamLog streams n's access-log records that pass f, one line each (a
// JSON object, a LogRecord, or ncsa set: the NCSA combined format), to
// line, until ctx ends or the node closes the stream. rate bounds the records a second
// the node sends (0: its default); beyond it the node drops records and
// says how many.
func (c *Client) StreamLog(ctx context.Context, n *pb.Node, f LogFilter, ncsa bool, rate int, line func(string)) error {
	q := f.Query()
	if ncsa {
		q.Set("format", "ncsa")
	}
	if rate > 0 {
		q.Set("rate", strconv.Itoa(rate))
	}
	resp, err := c.opsOpen(ctx, n, "/log?"+q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line(sc.Text())
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s /log: %w", n.GetMember().GetId(), err)
	}
	return nil
}
