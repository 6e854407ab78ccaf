package admin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// ErrWarmIncomplete: a warm's answer ended without its summary (the node
// stopped, or the connection broke).
var ErrWarmIncomplete = errors.New("shardcache: the warm ended without a summary")

// maxWarmLine bounds one progress message read.
const maxWarmLine = 64 << 10

// Warm has node n preheat req's images into its mirror policy's cache (POST
// /warm at its ops listener, with the admin token): every manifest and
// blob is filled by its owner. progress, when set, gets each step as it
// ends. It returns the summary.
func (c *Client) Warm(ctx context.Context, n *pb.Node, req *pb.WarmRequest, progress func(*pb.WarmProgress)) (*pb.WarmSummary, error) {
	id := n.GetMember().GetId()
	base := strings.TrimSuffix(n.GetMember().GetOpsUrl(), "/")
	if base == "" {
		return nil, fmt.Errorf("%s: %w", id, ErrNoOpsURL)
	}
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/warm", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: ops URL %q: %w", id, base, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.cfg.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("%s unreachable at %s: %w", id, base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		why := strings.TrimSpace(string(b))
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return nil, fmt.Errorf("%w: %s refused /warm: %s", ErrUnauthenticated, id, why)
		case http.StatusBadRequest:
			return nil, fmt.Errorf("%w: %s", ErrInvalid, why)
		}
		return nil, fmt.Errorf("%s /warm: %d %s", id, resp.StatusCode, why)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4096), maxWarmLine)
	for sc.Scan() {
		p := &pb.WarmProgress{}
		if err := protojson.Unmarshal(sc.Bytes(), p); err != nil {
			return nil, fmt.Errorf("%s /warm: a progress line is not a WarmProgress: %w", id, err)
		}
		if p.GetSummary() != nil {
			return p.GetSummary(), nil
		}
		if p.GetKind() == "" && p.GetError() != "" {
			return nil, fmt.Errorf("%s /warm: %s", id, p.GetError())
		}
		if progress != nil {
			progress(p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s /warm: %w: %v", id, ErrWarmIncomplete, err)
	}
	return nil, fmt.Errorf("%s /warm: %w", id, ErrWarmIncomplete)
}
