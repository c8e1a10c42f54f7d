// Command etcd-client is a fencecheck stdio client (docs/client-protocol.md) over etcd's Go
// client/v3/concurrency Mutex. The token is the lock key's create revision, which etcd makes
// strictly increasing per grant. Each worker keeps one session (one lease with keepalive) per
// lock grant, so a grant's lease is the session TTL (lease_ms rounded up to whole seconds, etcd's
// unit) and release revokes it.
package main

import (
	"context"
	"errors"
	"time"

	"fencecheck/stdio"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

type (
	request = stdio.Request
	reply   = stdio.Reply
)

type grant struct {
	session *concurrency.Session
	mutex   *concurrency.Mutex
}

var (
	cli       *clientv3.Client
	held      = stdio.Grants[grant]{}
	opTimeout = time.Second
)

func acquire(req request, _ time.Time) reply {
	ttl := int((req.LeaseMs + 999) / 1000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(req.TimeoutMs)*time.Millisecond)
	defer cancel()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(context.Background()))
	if err != nil {
		return reply{Status: "info", Error: "session: " + err.Error()}
	}
	m := concurrency.NewMutex(s, "/fencecheck/"+req.Lock)
	if err := m.Lock(ctx); err != nil {
		// Lock deletes its own key when the wait is cancelled, but that delete can fail too.
		s.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			return reply{Status: "info", Error: "lock-timeout"}
		}
		return reply{Status: "info", Error: err.Error()}
	}
	held[req.Lock] = grant{s, m}
	rev := m.Header().Revision
	// The create revision of our key is the revision of the Txn that made it, unless the key
	// was already there (a session reused); ask for it to be sure.
	gctx, gcancel := context.WithTimeout(context.Background(), opTimeout)
	defer gcancel()
	if resp, err := cli.Get(gctx, m.Key()); err == nil && len(resp.Kvs) == 1 {
		rev = resp.Kvs[0].CreateRevision
	} else {
		return reply{Status: "info", Error: "no create revision"}
	}
	return reply{Status: "ok", Token: &rev}
}

func renew(_ request, g grant) reply {
	// The session's keepalive renews the lease in the background; renew checks it is alive.
	select {
	case <-g.session.Done():
		return reply{Status: "fail", Error: "session-expired"}
	default:
		return reply{Status: "ok"}
	}
}

func release(_ request, g grant) reply {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := g.mutex.Unlock(ctx)
	g.session.Close() // revokes the lease
	if err != nil {
		return reply{Status: "info", Error: err.Error()}
	}
	return reply{Status: "ok"}
}

func connect() (err error) {
	opTimeout = stdio.OpTimeout()
	cli, err = clientv3.New(clientv3.Config{
		Endpoints:   stdio.Endpoints(),
		DialTimeout: opTimeout,
		Logger:      nil,
	})
	return err
}

func main() {
	stdio.Program{Name: "etcd-client", Connect: connect, Acquire: acquire,
		Renew: held.Renew(renew), Release: held.Release(release)}.Run()
}
