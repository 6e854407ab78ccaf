// Package metrics holds a node's Prometheus metrics and load-report totals,
// the route and status labels they are counted by, and the local-only
// estimate (Shadow). Every part of the data plane counts into one Set; it
// imports the store, for the figures it reads at scrape time, and nothing
// else of the data plane.
package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shardcache/shardcache/dataplane/store"
	"github.com/shardcache/shardcache/sdk/buildinfo"
)

// Routes, the label that tells relayed requests from local ones.
const (
	RouteLocal    = "local"
	RouteRelayed  = "relayed"
	RouteBypass   = "bypass"
	RouteRedirect = "redirect"
	RouteSliced   = "sliced"
	RouteRejected = "rejected" // refused before routing: a bad request
	RoutePurge    = "purge"    // the PURGE method
	RouteAborted  = "aborted"  // the handler ended before it routed
)

// Set is the node's Prometheus metrics, on a registry of its own (an
// embedded etcd in the same process registers on the default one), and
// the totals its load reports carry.
type Set struct {
	Registry *prometheus.Registry

	Requests *prometheus.CounterVec
	// Reasons counts the client requests that were not plain hits by the
	// rule that decided (Cache-Status detail: no-store, uri-miss, ...).
	Reasons       *prometheus.CounterVec
	Duration      *prometheus.HistogramVec
	ResponseSize  *prometheus.HistogramVec
	OriginReqs    *prometheus.CounterVec
	OriginBytes   prometheus.Counter
	PeerReqs      *prometheus.CounterVec
	PeerConns     *prometheus.CounterVec
	PeerBytes     *prometheus.CounterVec
	RelayFallback prometheus.Counter
	// PeerRefused counts peer requests refused, by reason; OpsRefused
	// the ops requests that needed the admin token.
	PeerRefused *prometheus.CounterVec
	OpsRefused  *prometheus.CounterVec
	// PurgeAuthRefused counts PURGE tokens refused, by reason.
	PurgeAuthRefused *prometheus.CounterVec
	// ClientConnsRefused counts client connections refused at the
	// per-address bound, ClientStalled those cut because their client
	// took no byte for the send timeout.
	ClientConnsRefused, ClientStalled prometheus.Counter
	RingEpoch                         prometheus.Gauge
	RingMembers                       prometheus.Gauge
	Session                           prometheus.Gauge
	CutOff                            prometheus.Gauge
	Member                            prometheus.Gauge
	// BackgroundPanics counts panics recovered in background tasks.
	BackgroundPanics *prometheus.CounterVec
	MemberLost       *prometheus.CounterVec
	Collapsed        prometheus.Counter
	// DigestMismatches counts registry bodies refused because their
	// digest is not the one asked for (nothing of them stored).
	DigestMismatches prometheus.Counter
	PolicyRevision   prometheus.Gauge
	Hot              *prometheus.CounterVec
	// HotRequests and CopyHits are Hot's two events counted per request,
	// looked up once.
	HotRequests, CopyHits prometheus.Counter
	Handoffs              *prometheus.CounterVec
	storeStats            storeCollector
	PeerCerts             *prometheus.CounterVec
	PeerCertExpiry        prometheus.Gauge
	OriginDuration        prometheus.Histogram
	PeerDuration          prometheus.Histogram
	Purges                *prometheus.CounterVec
	PurgeApply            prometheus.Histogram
	PurgeRevision         prometheus.Gauge
	Bans                  prometheus.Gauge
	// RouteBytes counts response body bytes by route, for load reports.
	RouteBytes map[string]*atomic.Uint64
	// routes holds each known route's duration and size observers, looked
	// up once rather than by label on every request.
	routes          map[string]routeObservers
	requestCounters requestCounters
	Totals          Totals

	// PeerStalled counts peer connections cut because the peer took no
	// byte of an answer for the peer send bound.
	PeerStalled prometheus.Counter
}

// Totals are the counts a node's load reports carry since it started.
type Totals struct {
	// OriginRequests counts the requests answered by the origin: fills and
	// revalidations, and bypassed requests, which reach it too.
	Requests, Hits, OriginRequests, Relayed, PeerBytes atomic.Uint64
	// HandoffAnswers counts handoff requests answered from the store.
	HandoffAnswers atomic.Uint64
	// PeerAnswers counts the requests answered for peers that relayed
	// them (handoff requests included).
	PeerAnswers atomic.Uint64
}

// Classic buckets reach 1 h and 100 GB, so that quantiles of long downloads
// and large objects are measured rather than clamped at the last bucket;
// native histograms give fine resolution where the scraper supports them.
var (
	durationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	sizeBuckets     = prometheus.ExponentialBuckets(256, 4, 16) // 256 B .. 256 GiB
)

// New builds the metrics on a registry of their own.
func New() *Set {
	m := &Set{Registry: prometheus.NewRegistry()}
	m.traffic()
	m.control()
	m.PeerCerts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_peer_certificates_total", Help: "Peer-hop certificates from the control plane, installed or refused.",
	}, []string{"result"})
	m.PeerCertExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_peer_certificate_expiry_timestamp_seconds", Help: "When the installed peer-hop certificate expires (Unix time).",
	})
	m.OriginDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "shardcache_origin_request_duration_seconds", Help: "Time from sending an origin request to its response header (or failure).",
		Buckets: durationBuckets, NativeHistogramBucketFactor: 1.1,
	})
	m.PeerDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "shardcache_peer_request_duration_seconds", Help: "Time from relaying a request to an owner to its response header (or failure).",
		Buckets: durationBuckets, NativeHistogramBucketFactor: 1.1,
	})
	m.Purges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_purges_total", Help: "Purges applied, by kind (url, prefix, tag).",
	}, []string{"kind"})
	m.PurgeApply = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shardcache_purge_apply_seconds",
		Help:    "Time from a purge's acceptance by the control plane (its recorded time) to its application on this node: the two clocks' offset included.",
		Buckets: durationBuckets, NativeHistogramBucketFactor: 1.1,
	})
	m.PurgeRevision = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_purge_revision", Help: "Highest purge revision applied.",
	})
	m.Bans = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_purge_bans", Help: "Bans checked at lookup: purges whose background sweep has not finished.",
	})
	m.RouteBytes = map[string]*atomic.Uint64{}
	m.routes = map[string]routeObservers{}
	for _, r := range []string{RouteLocal, RouteRelayed, RouteBypass, RouteRedirect, RouteSliced, RouteRejected} {
		m.RouteBytes[r] = new(atomic.Uint64)
	}
	for _, r := range []string{RouteLocal, RouteRelayed, RouteBypass, RouteRedirect, RouteSliced, RouteRejected, RoutePurge, RouteAborted} {
		m.routes[r] = routeObservers{m.Duration.WithLabelValues(r), m.ResponseSize.WithLabelValues(r)}
	}
	// Known label values start at zero, so that rates and dashboards see
	// every series from the first scrape.
	for _, v := range []struct {
		vec    *prometheus.CounterVec
		values []string
	}{
		{m.Hot, []string{"hot_request", "copy_admitted", "copy_hit", "replica_fill", "list_asked"}},
		{m.Handoffs, []string{"hit", "miss", "error"}},
		{m.Purges, []string{"url", "prefix", "tag"}},
		{m.PeerBytes, []string{"in", "out"}},
		{m.PeerConns, []string{"opened", "reused"}},
		{m.PeerCerts, []string{"installed", "refused"}},
	} {
		for _, l := range v.values {
			v.vec.WithLabelValues(l)
		}
	}
	m.Registry.MustRegister(m.OriginDuration, m.PeerDuration, m.Purges, m.PurgeApply, m.PurgeRevision, m.Bans, m.PeerCerts, m.PeerCertExpiry, m.Requests, m.Reasons, m.Duration, m.ResponseSize, m.OriginReqs, m.OriginBytes, m.PeerReqs,
		m.PeerConns, m.PeerBytes, m.PeerRefused, m.OpsRefused, m.PurgeAuthRefused, m.ClientConnsRefused, m.ClientStalled, m.PeerStalled, m.RelayFallback, m.RingEpoch, m.RingMembers, m.Session, m.CutOff, m.Member, m.MemberLost, m.BackgroundPanics, m.Collapsed, m.DigestMismatches, m.PolicyRevision, m.Hot, m.Handoffs, &m.storeStats,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	return m
}

// traffic makes the metrics of the requests a node serves and sends: the
// clients', the origin's and the peer hop's, and what was refused.
func (m *Set) traffic() {
	m.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_requests_total", Help: "Client requests by route, cache status, method and status class.",
	}, []string{"route", "cache", "method", "code"})
	m.Reasons = newReasons()
	m.Duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shardcache_request_duration_seconds", Help: "Client request duration by route.",
		Buckets: durationBuckets, NativeHistogramBucketFactor: 1.1,
	}, []string{"route"})
	m.ResponseSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shardcache_response_size_bytes", Help: "Client response body size by route.",
		Buckets: sizeBuckets, NativeHistogramBucketFactor: 1.1,
	}, []string{"route"})
	m.OriginReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_origin_requests_total", Help: "Requests sent to the origin, by purpose (fill, bypass) and result.",
	}, []string{"purpose", "result"})
	m.OriginBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardcache_origin_bytes_total", Help: "Body bytes received from the origin for cache fills.",
	})
	m.PeerReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_peer_requests_total", Help: "Requests relayed to an owner, by peer and result (2xx..5xx, error, skipped while the peer's circuit is open, dropped: an invalidation not sent, past the bound of those in flight).",
	}, []string{"peer", "result"})
	m.PeerConns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_peer_connections_total", Help: "Connections used for relayed requests: opened anew or reused from the pool.",
	}, []string{"state"})
	m.PeerBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_peer_bytes_total", Help: "Body bytes over the peer hop: in (answers from owners), out (answers to relaying peers).",
	}, []string{"direction"})
	m.PeerRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_peer_refused_total", Help: "Peer-listener requests refused, by reason (no_hop: not a relayed request; not_a_member: the certificate names no member of the ring; conns: a connection past --peer-max-conns-per-addr).",
	}, []string{"reason"})
	m.OpsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_ops_refused_total", Help: "Ops-listener requests (/drain, /warm, /debug/pprof/, the operator views) refused, by reason (no_token: not from loopback and no token; bad_token; bad_grant: a warm grant that is forged, expired or for another node).",
	}, []string{"reason"})
	m.PurgeAuthRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_purge_auth_refused_total", Help: "PURGE requests whose bearer token was refused, by reason (malformed, wrong: by the control plane, throttled: unread after too many).",
	}, []string{"reason"})
	m.ClientConnsRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardcache_client_conns_refused_total", Help: "Client connections refused (503) because their address held its bound of open connections (--client-max-conns-per-addr).",
	})
	m.ClientStalled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardcache_client_stalled_total", Help: "Client connections closed because the client took no byte of an answer for --client-send-timeout.",
	})
	m.PeerStalled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardcache_peer_stalled_total", Help: "Peer connections closed because the peer took no byte of an answer for --client-send-timeout plus the relay timeout.",
	})
	m.RelayFallback = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardcache_relay_fallbacks_total", Help: "Relays that failed before a response and were served by this node instead.",
	})
}

// control makes the metrics of the node's state: its ring epoch and
// membership, its session with the control plane, background work,
// policies, handoffs and hot keys.
func (m *Set) control() {
	m.RingEpoch = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_ring_epoch", Help: "The ring epoch this node serves with (0: none yet).",
	})
	m.RingMembers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_ring_members", Help: "Members of the current ring epoch.",
	})
	m.BackgroundPanics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_background_panics_total",
		Help: "Panics recovered in background tasks (revalidate, precopy, invalidate), by task; each is logged with its stack.",
	}, []string{"task"})
	m.Member = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_member", Help: "1 while the control plane holds this node as a member; 0 while it is refused or registering again.",
	})
	m.MemberLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_membership_lost_total",
		Help: "Times the node found it was not a member, by cause (duplicate_id, record_deleted, record_replaced, lease_lost).",
	}, []string{"cause"})
	m.CutOff = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_control_plane_cut_off",
		Help: "1 while the node has been cut off from the control plane longer than --cut-off-revalidate-after: what it stored before the cut is revalidated with the origin before it is served.",
	})
	m.Session = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_session_connected", Help: "1 while the session with the control plane is established.",
	})
	m.DigestMismatches = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardcache_registry_digest_mismatches_total", Help: "Registry blobs and manifests refused because their body's digest is not the one asked for; none is stored.",
	})
	m.Collapsed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardcache_collapsed_requests_total", Help: "Cache misses served by waiting on another request's origin fetch.",
	})
	m.PolicyRevision = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_policy_revision", Help: "Revision of the policy set in force (0: none received).",
	})
	m.Handoffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_handoff_requests_total",
		Help: "Misses after a ring change asked of the key's previous owner before the origin, by result (hit, miss, error).",
	}, []string{"result"})
	m.Hot = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_hot_key_events_total",
		Help: "Hot-key handling: requests for hot keys, copies admitted and served by non-owners, replica fills from the first owner, peers' hot-key lists asked for after a ring change (answered).",
	}, []string{"event"})
	m.HotRequests, m.CopyHits = m.Hot.WithLabelValues("hot_request"), m.Hot.WithLabelValues("copy_hit")
}

// buildInfo is shardcache_build_info: 1, labelled with the build, so that
// a mixed-version rollout shows in one query.
func buildInfo() prometheus.Collector {
	bi := buildinfo.Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardcache_build_info", Help: "Always 1; the labels name the build this process runs.",
		ConstLabels: prometheus.Labels{"component": "node", "version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	g.Set(1)
	return g
}

// WatchShadow exports the local-only estimate.
func (m *Set) WatchShadow(s *Shadow) {
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shardcache_local_estimate_requests_total",
			Help: "Cacheable requests this node received, as counted by the estimate of a local-only cache of its size (sampled).",
		}, func() float64 { r, _ := s.Totals(); return r }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shardcache_local_estimate_hits_total",
			Help: "Of those, the ones a cache of this node's size keeping only what its own clients asked for would have hit (sampled estimate).",
		}, func() float64 { _, h := s.Totals(); return h }),
	)
}

// WatchStore exports st's figures from now on.
func (m *Set) WatchStore(st *store.Store) { m.storeStats.st.Store(st) }

// storeCollector reads the store's sizes and counts at scrape time.
type storeCollector struct {
	st atomic.Pointer[store.Store]
}

var (
	storeBytesDesc  = prometheus.NewDesc("shardcache_store_bytes", "Bytes held by each store tier (memory, disk).", []string{"tier"}, nil)
	storeObjsDesc   = prometheus.NewDesc("shardcache_store_objects", "Objects held by each store tier (memory, disk; probation: new objects held in memory until their second use, counted in memory too).", []string{"tier"}, nil)
	storePausedDesc = prometheus.NewDesc("shardcache_disk_admission_paused",
		"1 while the disk tier stores nothing new because its data file may not grow: its file system is below the free-space guard.", nil, nil)
	storeDiscardDesc = prometheus.NewDesc("shardcache_disk_records_discarded_total",
		"Bad disk tier records found and dropped from the index, by reason (format, version, length, checksum, key, io).", []string{"reason"}, nil)
	storeAdmitDesc = prometheus.NewDesc("shardcache_store_admissions_total",
		"Objects stored by each tier (memory, disk).", []string{"tier"}, nil)
	storeEvictDesc = prometheus.NewDesc("shardcache_store_evictions_total",
		"Objects evicted from each tier (memory, disk) to make room.", []string{"tier"}, nil)
	storeRejectDesc = prometheus.NewDesc("shardcache_store_rejections_total",
		"Objects a tier's admission refused as asked for less often than what they would evict (memory: ristretto's TinyLFU; disk: TinyLFU against the oldest segment's objects).", []string{"tier"}, nil)
	storeErrorsDesc = prometheus.NewDesc("shardcache_disk_errors_total",
		"Disk tier I/O errors by operation (write, sync, read, allocate, load, checkpoint).", []string{"op"}, nil)
	storeLoadingDesc = prometheus.NewDesc("shardcache_disk_index_loading",
		"1 while the disk tier loads its index at start (the node serves from peers and the origin meanwhile).", nil, nil)
	storeLoadedDesc = prometheus.NewDesc("shardcache_disk_index_loaded_records",
		"Records the disk tier's index loaded at start, so far.", nil, nil)
	storeIndexDesc = prometheus.NewDesc("shardcache_disk_index_bytes",
		"Memory the disk tier's index takes.", nil, nil)
	storeStoppedDesc = prometheus.NewDesc("shardcache_disk_stripes_stopped",
		"Disk tier stripes that stopped writing after a disk error (full, failing); the node serves on without storing their new objects.", nil, nil)
	storeRewrittenDesc = prometheus.NewDesc("shardcache_disk_rewritten_total",
		"Objects the disk tier rewrote forward from a segment it reclaimed, as they were read since written.", nil, nil)
)

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{storeBytesDesc, storeObjsDesc, storePausedDesc, storeDiscardDesc, storeErrorsDesc,
		storeAdmitDesc, storeEvictDesc, storeRejectDesc, storeLoadingDesc, storeLoadedDesc, storeIndexDesc, storeStoppedDesc, storeRewrittenDesc} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st.Load()
	if st == nil {
		return
	}
	s := st.Stats()
	ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.GaugeValue, float64(s.MemoryBytes), "memory")
	ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.GaugeValue, float64(s.DiskBytes), "disk")
	ch <- prometheus.MustNewConstMetric(storeObjsDesc, prometheus.GaugeValue, float64(s.MemoryObjects), "memory")
	ch <- prometheus.MustNewConstMetric(storeObjsDesc, prometheus.GaugeValue, float64(s.DiskObjects), "disk")
	ch <- prometheus.MustNewConstMetric(storeObjsDesc, prometheus.GaugeValue, float64(s.ProbationObjects), "probation")
	ch <- prometheus.MustNewConstMetric(storePausedDesc, prometheus.GaugeValue, BoolGauge(s.Paused))
	ch <- prometheus.MustNewConstMetric(storeLoadingDesc, prometheus.GaugeValue, BoolGauge(s.Loading))
	ch <- prometheus.MustNewConstMetric(storeLoadedDesc, prometheus.GaugeValue, float64(s.Loaded))
	ch <- prometheus.MustNewConstMetric(storeIndexDesc, prometheus.GaugeValue, float64(s.IndexBytes))
	ch <- prometheus.MustNewConstMetric(storeStoppedDesc, prometheus.GaugeValue, float64(len(s.Stopped)))
	ch <- prometheus.MustNewConstMetric(storeRewrittenDesc, prometheus.CounterValue, float64(s.Rewritten))
	for reason, v := range s.Discarded {
		ch <- prometheus.MustNewConstMetric(storeDiscardDesc, prometheus.CounterValue, float64(v), reason)
	}
	for op, v := range s.Errors {
		ch <- prometheus.MustNewConstMetric(storeErrorsDesc, prometheus.CounterValue, float64(v), op)
	}
	for _, c := range []struct {
		d *prometheus.Desc
		m map[string]uint64
	}{{storeAdmitDesc, s.Admitted}, {storeEvictDesc, s.Evicted}, {storeRejectDesc, s.Rejected}} {
		for tier, v := range c.m {
			ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(v), tier)
		}
	}
}

// BoolGauge is a gauge's value for b.
func BoolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// StatusClass is a status code's label: "2xx" and so on, "other" out of
// range.
func StatusClass(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return statusClasses[code/100-1]
}

// statusClasses are StatusClass's answers, made once.
var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

func newReasons() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardcache_request_reasons_total",
		Help: "Client requests that were not plain hits, by the rule that decided: why they bypassed the cache, missed, were revalidated, or were not stored (Cache-Status detail).",
	}, []string{"reason"})
}

type routeObservers struct{ duration, size prometheus.Observer }

// ObserveRoute records a client request's duration and response size
// under its route.
//
// traceID, when the request was traced, is kept as the duration's exemplar
// (OpenMetrics), so that a latency panel's outlier links to its trace.
func (m *Set) ObserveRoute(route string, d time.Duration, bytes int64, traceID string) {
	o, ok := m.routes[route]
	if !ok {
		o = routeObservers{m.Duration.WithLabelValues(route), m.ResponseSize.WithLabelValues(route)}
	}
	if eo, ok := o.duration.(prometheus.ExemplarObserver); ok && traceID != "" {
		eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
	} else {
		o.duration.Observe(d.Seconds())
	}
	o.size.Observe(float64(bytes))
}

// Bucket is a histogram bucket: the observations up to LE.
type Bucket struct {
	LE    float64
	Count uint64
}

// DurationBuckets are the request duration histogram's cumulative classic
// buckets by route, as the registry gathers them now.
func (m *Set) DurationBuckets() map[string][]Bucket {
	out := map[string][]Bucket{}
	mfs, err := m.Registry.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "shardcache_request_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			route := ""
			for _, l := range mt.GetLabel() {
				if l.GetName() == "route" {
					route = l.GetValue()
				}
			}
			var bs []Bucket
			for _, b := range mt.GetHistogram().GetBucket() {
				bs = append(bs, Bucket{LE: b.GetUpperBound(), Count: b.GetCumulativeCount()})
			}
			out[route] = bs
		}
	}
	return out
}
