// Command etcd-election is a fencecheck stdio client (docs/client-protocol.md) over etcd's Go
// client/v3/concurrency Election, for the `leader` workload: a campaign is an acquire of the
// lock (election) it names, keeping office is a renew, resigning a release. The token is the
// term: the leader key's create revision (Election.Rev), strictly increasing per term. Each
// campaign gets its own session (one lease with keepalive), of lease_ms rounded up to whole
// seconds (etcd's unit); resigning revokes it.
package main

import (
	"context"
	"errors"
	"os"
	"time"

	"fencecheck/stdio"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

type (
	request = stdio.Request
	reply   = stdio.Reply
)

type term struct {
	session  *concurrency.Session
	election *concurrency.Election
}

var (
	cli       *clientv3.Client
	held      = stdio.Grants[term]{}
	opTimeout = time.Second
	me        = "candidate-" + os.Getenv("FENCECHECK_WORKER")
)

func campaign(req request, _ time.Time) reply {
	ttl := int((req.LeaseMs + 999) / 1000)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(context.Background()))
	if err != nil {
		return reply{Status: "info", Error: "session: " + err.Error()}
	}
	e := concurrency.NewElection(s, "/fencecheck/election/"+req.Lock)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(req.TimeoutMs)*time.Millisecond)
	defer cancel()
	if err := e.Campaign(ctx, me); err != nil {
		// Not elected in time: Campaign resigns its key; revoking the session's lease makes sure
		// it is gone. Only a revoke that surely happened makes the failure definite.
		code := "campaign: " + err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			code = "timeout"
		}
		if s.Close() == nil {
			return reply{Status: "fail", Error: code}
		}
		return reply{Status: "info", Error: code}
	}
	held[req.Lock] = term{s, e}
	rev := e.Rev()
	return reply{Status: "ok", Token: &rev}
}

func renew(_ request, t term) reply {
	select {
	case <-t.session.Done(): // the keepalive lost the lease: the term is over
		return reply{Status: "fail", Error: "session-expired"}
	default:
	}
	// The session's background keepalive last refreshed the lease up to a third of its TTL
	// ago; the worker counts a renewed lease from this request, so refresh it now, then
	// proclaim, which writes only if our leader key (by its create revision) is still there.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := cli.KeepAliveOnce(ctx, t.session.Lease()); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return reply{Status: "fail", Error: "lease-expired"}
		}
		return reply{Status: "info", Error: "keepalive: " + err.Error()}
	}
	if err := t.election.Proclaim(ctx, me); err != nil {
		if errors.Is(err, concurrency.ErrElectionNotLeader) {
			return reply{Status: "fail", Error: "not-leader"}
		}
		return reply{Status: "info", Error: "proclaim: " + err.Error()}
	}
	return reply{Status: "ok"}
}

func resign(_ request, t term) reply {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := t.election.Resign(ctx)
	if cerr := t.session.Close(); err == nil { // revokes the lease
		err = cerr
	}
	if err != nil {
		return reply{Status: "info", Error: "resign: " + err.Error()}
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
	stdio.Program{Name: "etcd-election", Connect: connect, Acquire: campaign,
		Renew: held.Renew(renew), Release: held.Release(resign)}.Run()
}
