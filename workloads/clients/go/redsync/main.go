// Command redsync-client is a fencecheck stdio client (docs/client-protocol.md) over go-redsync
// (github.com/go-redsync/redsync/v4, Redlock in Go) with go-redis v9: one Redsync over every
// master in FENCECHECK_ENDPOINTS. Redlock has no fencing token: every grant replies token null.
// redsync's own retries are cut to one try per Lock call and this loop retries until the
// request's timeout, so each reply can say when the winning attempt was sent (attempt_ns).
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"time"

	"fencecheck/stdio"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

type (
	request = stdio.Request
	reply   = stdio.Reply // Token always nil: Redlock has no token
)

var (
	rs        *redsync.Redsync
	held      = stdio.Grants[*redsync.Mutex]{}
	opTimeout = time.Second
)

// lostVote is an error redsync returns when the quorum said no (not an I/O failure of ours).
func lostVote(err error) bool {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken)
}

func acquire(req request, start time.Time) reply {
	deadline := start.Add(time.Duration(req.TimeoutMs) * time.Millisecond)
	m := rs.NewMutex(req.Lock,
		redsync.WithExpiry(time.Duration(req.LeaseMs)*time.Millisecond),
		redsync.WithTries(1),
		redsync.WithDriftFactor(0.01),
		redsync.WithTimeoutFactor(0.05))
	for {
		attempt := time.Since(start).Nanoseconds()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := m.LockContext(ctx)
		cancel()
		if err == nil {
			held[req.Lock] = m
			return reply{Status: "ok", AttemptNs: &attempt}
		}
		// A failed Lock unlocks whatever minority it got (redsync does so before returning), so
		// a lost vote is a definite failure; any other error may have left a grant behind.
		if !lostVote(err) {
			fmt.Fprintln(os.Stderr, "redsync-client: lock:", err)
		}
		if time.Now().Add(100 * time.Millisecond).After(deadline) {
			return reply{Status: "fail", Error: "not-acquired"}
		}
		time.Sleep(time.Duration(50+rand.Intn(100)) * time.Millisecond)
	}
}

func renew(_ request, m *redsync.Mutex) reply {
	// Extend keeps the expiry the mutex was made with, which is the lease the worker asks for.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if extended, err := m.ExtendContext(ctx); err != nil || !extended {
		if err != nil && !lostVote(err) {
			return reply{Status: "info", Error: "extend: " + err.Error()}
		}
		return stdio.NotHeld
	}
	return reply{Status: "ok"}
}

func release(_ request, m *redsync.Mutex) reply {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// A partial unlock may leave the key on a minority until it expires: not definite.
	if unlocked, err := m.UnlockContext(ctx); err != nil || !unlocked {
		return reply{Status: "info", Error: "unlock-partial"}
	}
	return reply{Status: "ok"}
}

func main() {
	opTimeout = stdio.OpTimeout()
	var pools []redis.Pool
	for _, ep := range stdio.Endpoints() {
		pools = append(pools, goredis.NewPool(goredislib.NewClient(&goredislib.Options{
			Addr:         ep,
			DialTimeout:  opTimeout,
			ReadTimeout:  opTimeout,
			WriteTimeout: opTimeout,
			MaxRetries:   -1, // a retried SET could be a second grant the history never saw
		})))
	}
	rs = redsync.New(pools...)
	stdio.Program{Name: "redsync-client", Acquire: acquire, Renew: held.Renew(renew),
		Release: held.Release(release), NoToken: true}.Run()
}
