package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// A policy whose origin is the cluster itself turns one request into a
// loop: the node fetches from a node, which fetches from a node. Nodes
// refuse such a request when it comes back (508, by its Via); the control
// plane refuses the policy before that, when an origin URL reaches a
// member's client address.

// loopTimeout bounds the name lookups of one check.
const loopTimeout = 2 * time.Second

// loopViolations names each origin URL of p that reaches a member of e at
// its public URL: the same port, and a host that is or resolves to the
// same address. A name that does not resolve is no violation: nothing
// says it is the cluster.
func loopViolations(ctx context.Context, p *pb.CachePolicy, e *pb.RingEpoch) []*errdetails.BadRequest_FieldViolation {
	if len(p.GetOriginUrls()) == 0 || len(e.GetMembers()) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, loopTimeout)
	defer cancel()
	var v []*errdetails.BadRequest_FieldViolation
	for i, o := range p.GetOriginUrls() {
		oaddrs := endpoints(ctx, o)
		for _, m := range e.GetMembers() {
			if overlap(oaddrs, endpoints(ctx, m.GetPublicUrl())) {
				v = append(v, &errdetails.BadRequest_FieldViolation{Field: fmt.Sprintf("origin_urls[%d]", i),
					Description: fmt.Sprintf("%s reaches %s, a node of this cluster (public URL %s): the cluster would fetch from itself", o, m.GetId(), m.GetPublicUrl())})
				break
			}
		}
	}
	return v
}

// endpoints are the address:port pairs an http(s) URL reaches.
func endpoints(ctx context.Context, raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := u.Hostname()
	ips := []string{host}
	if net.ParseIP(host) == nil {
		if ips, err = net.DefaultResolver.LookupHost(ctx, host); err != nil {
			return nil
		}
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if a := net.ParseIP(ip); a != nil {
			if a.IsUnspecified() {
				continue
			}
			out = append(out, net.JoinHostPort(a.String(), port))
		}
	}
	return out
}

func overlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}
