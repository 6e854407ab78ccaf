package ops

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/logstream"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/dataplane/slice"
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/buildinfo"
	"github.com/shardcache/shardcache/sdk/policy"
	"github.com/shardcache/shardcache/sdk/redact"
)

// The ops listener's answers to cachectl: live counters (/stats) and what
// this node stores for a URL (/inspect), read from memory, never changing
// what is stored (no lookup counts, no LRU moves).

// maxStatsHotKeys bounds the hot keys /stats lists.
const maxStatsHotKeys = 20

// serveStats answers the node's live figures: its load report's counters,
// computed now, its hottest keys, and its request duration buckets.
func (l *listener) serveStats(w http.ResponseWriter, _ *http.Request) {
	load, err := protojson.Marshal(l.cfg.Load())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	st := admin.NodeStats{LoadJSON: load, HotKeys: []admin.HotKey{}, Durations: map[string][]admin.Bucket{}}
	for route, bs := range l.cfg.Metrics.DurationBuckets() {
		for _, b := range bs {
			st.Durations[route] = append(st.Durations[route], admin.Bucket{LE: b.LE, Count: b.Count})
		}
	}
	if l.cfg.Hot != nil {
		for _, k := range l.cfg.HotKeys.Hottest(l.cfg.Hot, maxStatsHotKeys) {
			st.HotKeys = append(st.HotKeys, admin.HotKey{Key: redact.Printable(redact.Query(k.Shown)), Rate: k.Rate})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

// maxInspectSlices bounds the slices of one object inspect counts, and
// maxInspectTags the tags it lists of one response.
const (
	maxInspectSlices = 1 << 16
	maxInspectTags   = 100
)

// serveInspect answers what this node stores for ?url=: the policy and
// key that apply, the key's owners, and every stored response for it.
func (l *listener) serveInspect(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("url")
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		http.Error(w, "inspect: ?url= wants an absolute http or https URL, got "+strconv.Quote(raw), http.StatusBadRequest)
		return
	}
	// The URL's escapes spelled as a request's are on arrival, which its
	// key holds.
	policy.NormalURL(u)
	req := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{}}
	p := l.cfg.Policies.Load().Match(policy.Host(req), u.Path)
	key := p.Key(u.Scheme, req)
	in := admin.Inspection{Node: l.cfg.ID, URL: raw, Policy: p.Name, Key: key, Objects: []admin.StoredObject{}}
	if rt := l.cfg.Routes.Load(); rt != nil {
		var buf [4]*pb.Member
		for _, m := range rt.Owners(buf[:0], key, max(p.ReplicationFactor, 1)) {
			in.Owners = append(in.Owners, m.GetId())
			in.Owner = in.Owner || m.GetId() == l.cfg.ID
		}
	}
	now := time.Now()
	add := func(kind, variant string, e *store.Entry) {
		o := admin.StoredObject{Kind: kind, Variant: variant, Tier: "disk", Status: e.Status, Size: e.Size,
			Age: int64(e.Age(now) / time.Second), FreshFor: int64((e.Lifetime - e.Age(now)) / time.Second),
			Freshness: freshnessSource(e, p), ETag: e.Header.Get("Etag"), LastModified: e.Header.Get("Last-Modified")}
		httpcache.EntryTags(e.Header, func(tag string) bool {
			o.Tags = append(o.Tags, tag)
			return len(o.Tags) >= maxInspectTags
		})
		if e.InMemory() {
			o.Tier = "memory"
		}
		if e.Status == http.StatusPartialContent {
			o.Range = e.Header.Get("Content-Range")
		}
		in.Objects = append(in.Objects, o)
	}
	st := l.cfg.Store
	if p.SliceSize > 0 {
		// Each slice has an owner of its own: count the ones held here,
		// until a run of slices none of which is.
		held, missed := 0, 0
		var first *store.Entry
		for i := int64(0); i < maxInspectSlices && missed < 64; i++ {
			e, ok := st.Peek((&slice.Req{Index: i, Size: p.SliceSize}).Key(key))
			if !ok {
				missed++
				continue
			}
			if first == nil {
				first = e
			}
			held, missed = held+1, 0
		}
		if first != nil {
			add("slices", "", first)
			in.Objects[len(in.Objects)-1].Slices = held
		}
	}
	if e, ok := st.Peek(key); ok {
		if e.Status == 0 { // a Vary marker: the variants are under the key's group
			for _, k := range st.Members(key) {
				if v, ok := st.Peek(k); ok {
					kind := "variant"
					if k == owner.PartKey(key) {
						kind = "part"
					}
					// The request field values the variant is for, as "field=value; ...",
					// a credential's value (a client's Cookie) shown as REDACTED.
					values := strings.TrimPrefix(k, httpcache.VariantPrefix(key))
					add(kind, variantValues(values), v)
				}
			}
		} else {
			add("response", "", e)
		}
	} else if e, ok := st.Peek(owner.PartKey(key)); ok {
		add("part", "", e)
	}
	if l.cfg.Copies != nil {
		if e, ok := l.cfg.Copies.Get(key); ok {
			add("hot copy", "", e)
		}
	}
	if l.cfg.Notes != nil {
		if n, ok := l.cfg.Notes(key); ok {
			in.Last = &admin.LastAnswer{Cache: n.Cache, Reason: n.Reason, Status: n.Status, Stored: n.Stored, Age: int64(now.Sub(n.At) / time.Second)}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(in)
}

// freshnessSource says where e's freshness lifetime comes from, as the
// store computed it.
func freshnessSource(e *store.Entry, p *policy.Policy) string {
	h := e.Header
	cc, targeted := httpcache.ResponseControl(h, p.Targeted...)
	field := "Cache-Control"
	if targeted {
		field = "a targeted field (RFC 9213)"
	}
	switch {
	case cc.Has("no-cache"):
		return field + ": no-cache (revalidated on every use)"
	case cc.Has("s-maxage"):
		return field + ": s-maxage=" + cc["s-maxage"]
	case cc.Has("max-age"):
		return field + ": max-age=" + cc["max-age"]
	case h.Get("Expires") != "":
		return "Expires: " + h.Get("Expires")
	}
	if _, ok := p.StatusTTL(e.Status); ok {
		return "policy " + p.Name + ": status_ttls"
	}
	if p.DefaultTTL > 0 {
		return "policy " + p.Name + ": default_ttl"
	}
	if e.Lifetime > 0 && h.Get("Last-Modified") != "" {
		return "heuristic: 10 % of the time since Last-Modified"
	}
	return "none: revalidated on every use"
}

// serveLog streams this node's access-log records that pass the query's
// filter (admin.ParseLogFilter), one line each, JSON or (format=ncsa) the
// NCSA combined format, at most rate a second, until the caller leaves.
// Records beyond the rate, or that the caller is too slow for, are
// dropped, never waited for, and a line says how many every second.
func (l *listener) serveLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := admin.ParseLogFilter(q)
	if err != nil {
		http.Error(w, "log: "+err.Error(), http.StatusBadRequest)
		return
	}
	ncsa := false
	switch q.Get("format") {
	case "", "json":
	case "ncsa":
		ncsa = true
	default:
		http.Error(w, "log: format "+strconv.Quote(q.Get("format"))+": want json or ncsa", http.StatusBadRequest)
		return
	}
	rate := 0
	if v := q.Get("rate"); v != "" {
		if rate, err = strconv.Atoi(v); err != nil || rate < 1 || rate > logstream.MaxRate {
			http.Error(w, "log: rate "+strconv.Quote(v)+": want 1 to "+strconv.Itoa(logstream.MaxRate)+" records a second", http.StatusBadRequest)
			return
		}
	}
	// A caller is its address and the credential it showed (a hash of it):
	// a dashboard's read-only token cannot take the streams an operator's
	// admin token would open from the same host.
	who, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		who = r.RemoteAddr
	}
	cred := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	s, err := l.cfg.Logs.OpenFor(who+" "+hex.EncodeToString(cred[:8]), f, rate)
	if err != nil {
		http.Error(w, "log: "+err.Error(), http.StatusTooManyRequests)
		return
	}
	defer l.cfg.Logs.Close(s)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	if ncsa {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var reported uint64
	stopping := l.cfg.Logs.Done()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-stopping:
			return
		case rec := <-s.C:
			if _, err := w.Write(logstream.Line(rec, ncsa, s.Full())); err != nil {
				return
			}
			rc.Flush()
		case <-tick.C:
			if d := s.Dropped.Load(); d != reported {
				note := `{"dropped":` + strconv.FormatUint(d-reported, 10) + "}\n"
				if ncsa {
					note = "# dropped " + strconv.FormatUint(d-reported, 10) + " records (rate or a slow reader)\n"
				}
				reported = d
				if _, err := w.Write([]byte(note)); err != nil {
					return
				}
				rc.Flush()
			}
		}
	}
}

// serveMembers answers who this node is and the ring it serves with, so
// that cachectl finds every node's ops listener without the control plane.
func (l *listener) serveMembers(w http.ResponseWriter, _ *http.Request) {
	m := admin.Members{Node: l.cfg.ID, Version: buildinfo.Read().Version, OpsURL: l.cfg.OpsURL, Epoch: json.RawMessage("null")}
	if rt := l.cfg.Routes.Load(); rt != nil {
		b, err := protojson.Marshal(rt.Epoch)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		m.Epoch = b
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(m)
}

// variantValues is a variant key's request field values ("field=value",
// separated by \x1e) as /inspect shows them: "; "-separated, the values of
// credential fields (redact.Secret: Cookie, Authorization, API keys, any
// naming a token, secret or password) REDACTED, the rest Printable: the
// read-only token sees which variants exist, never a client's session or
// key.
func variantValues(values string) string {
	var b strings.Builder
	for _, fv := range strings.Split(values, "\x1e") {
		if fv == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		field, _, _ := strings.Cut(fv, "=")
		if redact.Secret(field) {
			b.WriteString(field + "=REDACTED")
		} else {
			b.WriteString(redact.Printable(fv))
		}
	}
	return b.String()
}
