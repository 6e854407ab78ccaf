package controlplane

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A replica waiting in its campaign (another leads) that loses etcd stops
// when told: the campaign's resignation, which waits for etcd with no
// deadline, does not hold it.
func TestAReplicaCampaigningWithoutEtcdStops(t *testing.T) {
	etcd := testEtcd(t)
	leader, _, _ := startServer(t, []string{etcd})
	waitFor(t, func() bool { return leader.isLeader.Load() })
	proxy := startTCPProxy(t, etcd)
	s, _, stop := startServer(t, []string{proxy.url()})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	waitFor(t, func() bool { // both replicas' keys: s is campaigning
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, s.state.electionPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})
	if s.isLeader.Load() {
		t.Fatal("the second replica leads; want it campaigning")
	}
	proxy.freeze() // etcd unreachable, the connections still open
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("a campaigning replica without etcd did not stop within 30 s")
	}
}
