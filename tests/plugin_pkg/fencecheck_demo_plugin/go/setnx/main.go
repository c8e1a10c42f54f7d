// Command demo-go-setnx is the demo plugin's shipped Go client (docs/extending.md): SET NX PX
// with an owner value on the one redis-server of FENCECHECK_ENDPOINTS, with go-redis v9, over the
// shared stdio request loop (fencecheck/stdio). No fencing token: every reply says token null.
// It is built by `fencecheck build demo-go-setnx` from this folder, which the plugin's
// ClientDescriptor names; nothing in fencecheck's tree knows it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"fencecheck/stdio"
	"github.com/redis/go-redis/v9"
)

const (
	renewScript = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
		"return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
	releaseScript = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
		"return redis.call('del', KEYS[1]) end return 0"
)

type reply = stdio.Reply

var (
	rdb       *redis.Client
	held      = stdio.Grants[string]{} // lock -> the owner value its key holds
	opTimeout = time.Second
	prefix    = "demo:" // the key_prefix option (DemoClientOptions)
)

func owner() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func acquire(req stdio.Request, start time.Time) reply {
	deadline := start.Add(time.Duration(req.TimeoutMs) * time.Millisecond)
	me := owner()
	for {
		attempt := time.Since(start).Nanoseconds()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		ok, err := rdb.SetNX(ctx, prefix+req.Lock, me, time.Duration(req.LeaseMs)*time.Millisecond).Result()
		cancel()
		if err != nil { // the SET may have landed
			return reply{Status: "info", Error: "redis: " + err.Error()}
		}
		if ok {
			held[req.Lock] = me
			return reply{Status: "ok", AttemptNs: &attempt}
		}
		if time.Now().After(deadline) {
			return reply{Status: "fail", Error: "timeout"}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func script(src string, req stdio.Request, me string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return rdb.Eval(ctx, src, []string{prefix + req.Lock}, append([]any{me}, args...)...).Int64()
}

func renew(req stdio.Request, me string) reply {
	n, err := script(renewScript, req, me, req.LeaseMs)
	if err != nil {
		return reply{Status: "info", Error: "redis: " + err.Error()}
	}
	if n == 0 {
		delete(held, req.Lock)
		return reply{Status: "fail", Error: "lost"}
	}
	return reply{Status: "ok"}
}

func release(req stdio.Request, me string) reply {
	if _, err := script(releaseScript, req, me); err != nil {
		return reply{Status: "info", Error: "redis: " + err.Error()}
	}
	return reply{Status: "ok"}
}

func main() {
	opTimeout = stdio.OpTimeout()
	var opts struct {
		KeyPrefix string `json:"key_prefix"`
	}
	stdio.Options(&opts)
	if opts.KeyPrefix != "" {
		prefix = opts.KeyPrefix
	}
	rdb = redis.NewClient(&redis.Options{
		Addr:         stdio.Endpoints()[0],
		DialTimeout:  opTimeout,
		ReadTimeout:  opTimeout,
		WriteTimeout: opTimeout,
		MaxRetries:   -1, // a retried SET could be a grant the history never saw
	})
	stdio.Program{
		Name:    "demo-go-setnx",
		Connect: func() error { return rdb.Ping(context.Background()).Err() },
		Acquire: acquire, Renew: held.Renew(renew), Release: held.Release(release),
		Close: func() { _ = rdb.Close() }, NoToken: true,
	}.Run()
}
