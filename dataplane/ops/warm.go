package ops

import (
	"context"
	"errors"
	"io"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardcache/shardcache/dataplane/warm"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Warmer preheats images (warm.Warmer).
type Warmer interface {
	Warm(ctx context.Context, req *pb.WarmRequest, emit func(*pb.WarmProgress)) (*pb.WarmSummary, error)
}

// maxWarmRequest bounds a POST /warm body.
const maxWarmRequest = 64 << 10

// serveWarm is POST /warm: a WarmRequest in protobuf JSON; the answer is
// one WarmProgress a line, flushed as each step ends, the last with the
// summary. A refused request is a 400 naming the problem.
func (l *listener) serveWarm(w http.ResponseWriter, r *http.Request) {
	if l.cfg.Warm == nil {
		http.Error(w, "this node does not warm images", http.StatusNotImplemented)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWarmRequest+1))
	if err != nil || len(body) > maxWarmRequest {
		http.Error(w, "a warm request is at most 64 KiB of protobuf JSON", http.StatusBadRequest)
		return
	}
	req := &pb.WarmRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		http.Error(w, "a warm request is a WarmRequest in protobuf JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	started := false
	emit := func(p *pb.WarmProgress) {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		b, _ := protojson.Marshal(p)
		w.Write(append(b, '\n'))
		rc.Flush()
	}
	sum, err := l.cfg.Warm.Warm(r.Context(), req, emit)
	if err != nil {
		if !started {
			code := http.StatusInternalServerError
			if errors.Is(err, warm.ErrInvalid) {
				code = http.StatusBadRequest
			}
			http.Error(w, err.Error(), code)
			return
		}
		emit(&pb.WarmProgress{Result: "failed", Error: err.Error()})
		return
	}
	emit(&pb.WarmProgress{Summary: sum})
}
