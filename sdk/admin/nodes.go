package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/opsclient"
	"github.com/shardcache/shardcache/sdk/redact"
)

// A node's ops listener answers two admin questions directly, from its
// own memory: its live counters (/stats), and what it stores for a URL
// (/inspect). The client asks each node at its member's ops_url, with the
// admin token; the control plane's last load report can be seconds old.

// ErrNoOpsURL: the node did not say where its ops listener is.
var ErrNoOpsURL = opsclient.ErrNoOpsURL

// Inspection is what one node holds for a URL, and how the cluster keys
// and places it.
type Inspection struct {
	Node   string   `json:"node"`
	URL    string   `json:"url"`
	Policy string   `json:"policy"`
	Key    string   `json:"key"`
	Owners []string `json:"owners"` // the key's owners in the node's ring, first first
	Owner  bool     `json:"owner"`  // this node is one of them
	// Objects are the stored responses for the key on this node; none
	// when it stores nothing for it.
	Objects []StoredObject `json:"objects"`
	// Last is the node's last answer for the key that was not a plain
	// hit, or what removed its stored response; nil when it has none
	// (nodes keep a bounded number of these, the latest).
	Last *LastAnswer `json:"last,omitempty"`
}

// LastAnswer is a node's last answer for a key that was not a plain hit:
// how it answered and the rule that decided (Cache-Status detail); or,
// with Cache empty, what removed the stored response (purged,
// invalidated).
type LastAnswer struct {
	Cache  string `json:"cache,omitempty"` // X-Cache: MISS, BYPASS, EXPIRED...
	Reason string `json:"reason"`
	Status int    `json:"status,omitempty"`
	Stored bool   `json:"stored"`
	Age    int64  `json:"age_seconds"` // how long ago
}

// StoredObject is one stored response.
type StoredObject struct {
	// Kind is "response", "variant" (of a response that varies),
	// "part" (a stored range), "slices" (of a sliced object) or
	// "hot copy" (of a hot key this node does not own).
	Kind    string `json:"kind"`
	Variant string `json:"variant,omitempty"` // the request field values a variant is for
	Range   string `json:"range,omitempty"`   // a part's Content-Range
	Tier    string `json:"tier"`              // memory or disk
	Status  int    `json:"status"`
	Size    int64  `json:"size"` // bytes stored (coded when the store compressed it)
	Age     int64  `json:"age_seconds"`
	// FreshFor is the freshness left in seconds, negative once stale;
	// Freshness says where the lifetime comes from.
	FreshFor     int64    `json:"fresh_for_seconds"`
	Freshness    string   `json:"freshness"`
	ETag         string   `json:"etag,omitempty"`
	LastModified string   `json:"last_modified,omitempty"`
	Tags         []string `json:"tags,omitempty"`
	Slices       int      `json:"slices,omitempty"` // of a sliced object: how many this node holds
}

// NodeStats are a node's live figures, as its ops listener's /stats
// answers them.
type NodeStats struct {
	// Load are its counters since it started, as in its load reports.
	Load *pb.LoadReport `json:"-"`
	// LoadJSON is Load in protojson, as sent.
	LoadJSON json.RawMessage `json:"load"`
	// HotKeys are its hottest keys, hottest first, with their estimated
	// rate in requests per minute.
	HotKeys []HotKey `json:"hot_keys"`
	// Durations are its request duration histogram's cumulative buckets
	// by route since it started: two readings give a window's quantiles.
	Durations map[string][]Bucket `json:"durations"`
}

// HotKey is one of a node's hottest keys.
type HotKey struct {
	Key  string  `json:"key"`
	Rate float64 `json:"rate_per_minute"`
}

// Bucket is a histogram bucket: the count of observations up to LE.
type Bucket struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// NodeStats reads n's live figures from its ops listener.
func (c *Client) NodeStats(ctx context.Context, n *pb.Node) (*NodeStats, error) {
	b, err := c.opsGet(ctx, n, "/stats")
	if err != nil {
		return nil, err
	}
	var st NodeStats
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s /stats: %w", n.GetMember().GetId(), err)
	}
	st.Load = &pb.LoadReport{}
	if err := protojson.Unmarshal(st.LoadJSON, st.Load); err != nil {
		return nil, fmt.Errorf("%s /stats: %w", n.GetMember().GetId(), err)
	}
	return &st, nil
}

// Inspect asks n what it stores for rawURL (an absolute http or https
// URL).
func (c *Client) Inspect(ctx context.Context, n *pb.Node, rawURL string) (*Inspection, error) {
	u, err := url.Parse(rawURL)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: %q is not an absolute http or https URL", ErrInvalid, rawURL)
	}
	b, err := c.opsGet(ctx, n, "/inspect?url="+url.QueryEscape(rawURL))
	if err != nil {
		return nil, err
	}
	var in Inspection
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("%s /inspect: %w", n.GetMember().GetId(), err)
	}
	return &in, nil
}

// maxOpsAnswer bounds what is read of an ops answer.
const maxOpsAnswer = 4 << 20

// opsGet reads the answer to a GET of path on n's ops listener, within
// the client's timeout when ctx has no deadline, sending a read grant for
// n (see opsOpen).
func (c *Client) opsGet(ctx context.Context, n *pb.Node, path string) ([]byte, error) {
	return c.opsRead(ctx, n, path, c.readGrant(n))
}

// opsRead is opsGet sending token.
func (c *Client) opsRead(ctx context.Context, n *pb.Node, path, token string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, min(c.cfg.Timeout, 5*time.Second))
		defer cancel()
	}
	resp, err := c.opsOpenWith(ctx, n, path, token)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOpsAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", redact.Printable(n.GetMember().GetId()), path, err)
	}
	if len(b) > maxOpsAnswer {
		return nil, fmt.Errorf("%s %s: the node's answer is larger than %d bytes; nothing of it is shown", redact.Printable(n.GetMember().GetId()), path, maxOpsAnswer)
	}
	return b, nil
}

// readGrantLife is how long the read grant sent to a node's ops listener
// is good for.
const readGrantLife = 2 * time.Minute

// opsOpen sends a GET of path to n's ops listener and returns its 200
// answer, body unread; any other outcome is an error that names the node
// and says why, ErrUnauthenticated or ErrInvalid where it is one. The
// listener is the one the member advertises, which whoever holds the join
// token can register, so it gets a read grant for that node signed with
// the token, never the token itself.
func (c *Client) opsOpen(ctx context.Context, n *pb.Node, path string) (*http.Response, error) {
	return c.opsOpenWith(ctx, n, path, c.readGrant(n))
}

// readGrant is the read grant for n's views, signed with the client's
// token; none without a token.
func (c *Client) readGrant(n *pb.Node) string {
	if c.cfg.Token == "" {
		return ""
	}
	return opsclient.ReadGrant(c.cfg.Token, n.GetMember().GetId(), time.Now().Add(readGrantLife))
}

// opsOpenWith is opsOpen sending token.
func (c *Client) opsOpenWith(ctx context.Context, n *pb.Node, path, token string) (*http.Response, error) {
	resp, err := opsclient.Client{Token: token}.Do(ctx, n.GetMember(), http.MethodGet, path, nil)
	switch {
	case errors.Is(err, opsclient.ErrRefused):
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	case errors.Is(err, opsclient.ErrInvalid):
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return resp, err
}
