package front

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/owner"
	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/redact"
)

// Full records, for the log streams that ask for them (cachectl log
// --full): built only while such a stream is open, from the request's
// account (owner.Account), its header and its answer's.

// fullDetail is the full part of a request's record: the request's and
// the answer's fields, its stages, and the requests made for it.
func fullDetail(req, resp http.Header, a *owner.Account) *admin.LogDetail {
	d := &admin.LogDetail{Request: loggedFields(req), Response: loggedFields(resp), Stages: stages(a),
		Calls: logCalls(a.Calls), DroppedCalls: a.Dropped}
	if d.Stages == (admin.LogStages{}) {
		// Relayed: the stages are its owner's.
		for _, c := range a.Calls {
			if c.Kind == owner.CallPeer && c.Status > 0 && c.Account != nil {
				d.Stages = stages(c.Account)
			}
		}
	}
	return d
}

func stages(a *owner.Account) admin.LogStages {
	return admin.LogStages{LookupMS: ms(a.Lookup), CollapseWaitMS: ms(a.CollapseWait), OriginFirstByteMS: ms(a.OriginFirstByte), StoreMS: ms(a.Store)}
}

func logCalls(cs []owner.Call) []admin.LogCall {
	out := make([]admin.LogCall, 0, len(cs))
	for _, c := range cs {
		lc := admin.LogCall{Kind: c.Kind, Node: c.Node, Status: c.Status, Error: redact.Printable(redact.Text(c.Error)), FirstByteMS: ms(c.FirstByte)}
		if c.Account != nil {
			st := stages(c.Account)
			lc.Stages, lc.Calls = &st, logCalls(c.Account.Calls)
		}
		out = append(out, lc)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loggedFields is h as a full record shows it: at most admin.MaxLogFields
// fields (the first by name), values cut at admin.MaxLogValue bytes,
// credentials redacted, what is not printable escaped (redact.Printable), the
// cluster's own hop fields left out.
func loggedFields(h http.Header) map[string][]string {
	names := make([]string, 0, len(h))
	for k := range h {
		if !strings.HasPrefix(k, hop.Prefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	out := make(map[string][]string, min(len(names), admin.MaxLogFields))
	for _, k := range names[:min(len(names), admin.MaxLogFields)] {
		vs := h[k]
		lv := make([]string, 0, len(vs))
		for _, v := range vs {
			switch v = redact.Printable(v); {
			case redact.Secret(k):
				v = "REDACTED"
			case len(v) > admin.MaxLogValue:
				v = v[:admin.MaxLogValue] + "..."
			}
			if k == "Referer" || k == "Location" || k == "Content-Location" {
				v = redact.Query(v) // a URL's credentials, as the record's path has them
			}
			lv = append(lv, v)
			if len(lv) == 8 {
				break // a field repeated beyond reason
			}
		}
		out[k] = lv
	}
	return out
}
