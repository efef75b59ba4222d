package etcdcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/test/framework/relay"
)

func TestEtcdCluster(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Skipf("no etcd binary (`make controlplane` builds it): %v", err)
	}
	cluster, err := Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })

	put(t, client, "k", "v1")
	if got := get(t, client, "k"); got != "v1" {
		t.Fatalf("k = %q, want v1", got)
	}

	// A follower's crash leaves a quorum; on restart it catches up from its data dir and the leader.
	leader := leaderIndex(t, cluster)
	follower := (leader + 1) % 3
	if err := cluster.Kill(follower); err != nil {
		t.Fatal(err)
	}
	put(t, client, "k", "v2")
	if err := cluster.Restart(follower); err != nil {
		t.Fatal(err)
	}
	pinned := pinnedClient(t, cluster, cluster.Member(follower).ClientURL)
	eventually(t, 5*time.Second, "the restarted member to serve v2", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := pinned.Get(ctx, "k", clientv3.WithSerializable())
		if err == nil && (len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v2") {
			err = errors.New("stale value")
		}
		return err
	})

	// A paused leader is replaced; once resumed it answers again, as a follower.
	leader = leaderIndex(t, cluster)
	if err := cluster.Pause(leader); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a new leader while the old one is paused", func() error {
		if next := leaderIndex(t, cluster); next == leader {
			return errors.New("the paused member is still the leader")
		}
		return nil
	})
	put(t, client, "k", "v3")
	if err := cluster.Resume(leader); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the resumed member to answer", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := client.Status(ctx, cluster.Member(leader).ClientURL)
		return err
	})

	// A client pinned to a member through a proxy times out while the proxy is cut, and works after Heal.
	proxy, err := relay.StartProxy(cluster.Member(follower).ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	behind := pinnedClient(t, cluster, "https://"+proxy.Addr)
	if got := get(t, behind, "k"); got != "v3" {
		t.Fatalf("k through the proxy = %q, want v3", got)
	}
	proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = behind.Get(ctx, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get through a cut proxy: %v, want a timeout", err)
	}
	proxy.Heal()
	eventually(t, 5*time.Second, "a Get through the healed proxy", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := behind.Get(ctx, "k")
		return err
	})
}

func pinnedClient(t *testing.T, cluster *Cluster, endpoint string) *clientv3.Client {
	t.Helper()
	client, err := cluster.newClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func leaderIndex(t *testing.T, cluster *Cluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	i, err := cluster.LeaderIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// put retries: a request the balancer sent to a paused or killed member times out rather than failing
// over, as it would for any client.
func put(t *testing.T, client *clientv3.Client, key, value string) {
	t.Helper()
	eventually(t, 10*time.Second, "Put "+key+"="+value, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := client.Put(ctx, key, value)
		return err
	})
}

func get(t *testing.T, client *clientv3.Client, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("Get %s: %d keys", key, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value)
}

func eventually(t *testing.T, timeout time.Duration, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %s for %s: %v", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
