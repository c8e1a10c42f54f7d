// Command consul-client is a fencecheck stdio client (docs/client-protocol.md) over Consul's Go
// API lock (github.com/hashicorp/consul/api, Lock): an acquire of lock L is a Lock on the key
// fencecheck/L with a session of its own, which api.Lock creates and renews in the background
// (every half TTL) while it holds the key, and whose loss it reports on the channel Lock
// returns. Worker i talks to server i mod n (FENCECHECK_ENDPOINTS; no client agent).
//
// The token is the key's ModifyIndex at the grant: the Raft index of the write that acquired
// it, read back right after Lock returns (the key carries a value unique to this grant, so the
// read is of our own acquisition). Not its LockIndex: that counts acquisitions of one key and
// starts again at 1 once the key is deleted (`consul lock` deletes its key when it exits), so it
// can repeat across grants; ModifyIndex never goes back (tests/clusters/test_consul.py).
//
// Options (FENCECHECK_OPTIONS): session_ttl_ms (default: the lease), lock_delay_ms (default:
// not set, so Consul's 15 s; 0 is sent as 1 ms, see lockOptions). renew renews the session itself (Session.Renew) and checks the
// lock is not lost; release is Unlock (the key released, then the session destroyed).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"fencecheck/stdio"
	"github.com/hashicorp/consul/api"
)

type (
	request = stdio.Request
	reply   = stdio.Reply
)

type options struct {
	SessionTTLMs int64  `json:"session_ttl_ms"`
	LockDelayMs  *int64 `json:"lock_delay_ms"`
}

type grant struct {
	lock    *api.Lock
	lost    <-chan struct{}
	session string
}

var (
	client    *api.Client
	held      = stdio.Grants[grant]{}
	opts      options
	opTimeout = time.Second
	worker    = os.Getenv("FENCECHECK_WORKER")
	grants    atomic.Int64
)

const (
	keyPrefix = "fencecheck/"
	// Between attempts of one acquire whose server did not answer.
	retryPause = 100 * time.Millisecond
)

func lockOptions(req request) *api.LockOptions {
	ttl := time.Duration(req.LeaseMs) * time.Millisecond
	if opts.SessionTTLMs > 0 {
		ttl = time.Duration(opts.SessionTTLMs) * time.Millisecond
	}
	name := fmt.Sprintf("fencecheck worker %s grant %d", worker, grants.Add(1))
	lo := &api.LockOptions{
		Key:         keyPrefix + req.Lock,
		Value:       []byte(fmt.Sprintf("%s pid %d", name, os.Getpid())),
		SessionName: name,
		SessionTTL:  ttl.String(),
		// One blocking read waits at most this long before Lock looks at its stop channel
		// again: the acquire's deadline is kept to within it.
		LockWaitTime: 500 * time.Millisecond,
	}
	if opts.LockDelayMs != nil {
		delay := time.Duration(*opts.LockDelayMs) * time.Millisecond
		if delay == 0 {
			// Session.Create leaves a zero LockDelay out of its request, and the server then
			// applies its default, 15 s: 1 ms is the least lock-delay the api can ask for.
			delay = time.Millisecond
		}
		lo.SessionOpts = &api.SessionEntry{Name: name, TTL: ttl.String(), LockDelay: delay}
	}
	return lo
}

func acquire(req request, start time.Time) reply {
	deadline := start.Add(time.Duration(req.TimeoutMs) * time.Millisecond)
	for {
		r, again := attempt(req, deadline)
		if !again || time.Now().Add(retryPause).After(deadline) {
			return r
		}
		time.Sleep(retryPause)
	}
}

// attempt is one Lock, until the deadline; again: it surely failed before the deadline (the
// server did not answer or refused), worth another attempt.
func attempt(req request, deadline time.Time) (reply, bool) {
	lo := lockOptions(req)
	l, err := client.LockOpts(lo)
	if err != nil {
		return reply{Status: "fail", Error: "lock-options: " + err.Error()}, false
	}
	stop := make(chan struct{})
	timer := time.AfterFunc(time.Until(deadline), func() { close(stop) })
	lost, err := l.Lock(stop)
	timer.Stop()
	if err != nil {
		// Only a failed acquisition may have happened at the server. A session that could not
		// be made, or a read of the key that failed, acquired nothing: Lock acquires only
		// after a read shows the key free, and a refused acquisition is answered false.
		if strings.HasPrefix(err.Error(), "failed to acquire lock") {
			return reply{Status: "info", Error: "lock: " + err.Error()}, false
		}
		return reply{Status: "fail", Error: "unavailable"}, true
	}
	if lost == nil {
		return reply{Status: "fail", Error: "not-acquired"}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	q := (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
	pair, _, err := client.KV().Get(lo.Key, q)
	if err != nil || pair == nil || string(pair.Value) != string(lo.Value) || pair.Session == "" {
		// Granted, but already gone or unreadable: no token to fence with. Let it go.
		go func() { _ = l.Unlock() }()
		return reply{Status: "info", Error: "no-token"}, false
	}
	held[req.Lock] = grant{l, lost, pair.Session}
	token := int64(pair.ModifyIndex)
	return reply{Status: "ok", Token: &token}, false
}

func renew(_ request, g grant) reply {
	select {
	case <-g.lost:
		return reply{Status: "fail", Error: "lock-lost"}
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	entry, _, err := client.Session().Renew(g.session, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return reply{Status: "info", Error: "renew: " + err.Error()}
	}
	if entry == nil { // the server no longer has the session
		return reply{Status: "fail", Error: "session-invalidated"}
	}
	return reply{Status: "ok"}
}

func release(_ request, g grant) reply {
	if err := g.lock.Unlock(); err != nil {
		return reply{Status: "info", Error: "unlock: " + err.Error()}
	}
	return reply{Status: "ok"}
}

func connect() error {
	opTimeout = stdio.OpTimeout()
	stdio.Options(&opts)
	eps := stdio.Endpoints()
	n, _ := strconv.Atoi(worker)
	cfg := api.DefaultConfig()
	cfg.Address = eps[n%len(eps)]
	var err error
	client, err = api.NewClient(cfg)
	return err
}

func main() {
	stdio.Program{Name: "consul-client", Connect: connect, Acquire: acquire,
		Renew: held.Renew(renew), Release: held.Release(release)}.Run()
}
