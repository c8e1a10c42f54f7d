// Command nats-kv-client is a fencecheck stdio client (docs/client-protocol.md) over the Go
// nats.go JetStream KV (github.com/nats-io/nats.go/jetstream), with the same lock as the nats-py
// client (workloads/clients/nats.py): a lock is one key of the service's bucket; acquire = a
// create (an Update expecting no value, or over a delete marker: see create), polled until the
// request's timeout; the token is the revision the create was stored at; renew = Update
// expecting our last revision; release = Delete expecting it. The lease is the bucket's max_age (the service sets
// it to the run's lease), so a lease longer than the bucket's TTL is refused.
//
// Automatic reconnect is off (a request buffered while disconnected would be sent later, behind
// the history's back): a dead connection is replaced at the next request, on the next server
// (worker i starts at server i mod n), and nothing is sent if that fails (a definite failure).
// A wrong-last-revision refusal, a key that exists, or no responders (a stream leader election)
// is definite; a timeout or a connection lost while waiting for the acknowledgement is
// uncertain (the write may be in the Raft log).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"fencecheck/stdio"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type (
	request = stdio.Request
	reply   = stdio.Reply
)

type options struct {
	Bucket      string `json:"bucket"`
	BucketTTLMs int64  `json:"bucket_ttl_ms"`
	PollMs      int64  `json:"poll_ms"`
}

type grant struct {
	revision uint64 // our last write's
	owner    []byte
}

// wrongLast: JSStreamWrongLastSequenceErrF (10071) and its constant form (10164).
var wrongLast = map[jetstream.ErrorCode]bool{10071: true, 10164: true}

var (
	opts      = options{Bucket: "fc-locks", PollMs: 20}
	opTimeout = time.Second
	servers   []string
	nc        *nats.Conn
	kv        jetstream.KeyValue
	stream    jetstream.Stream // the bucket's, for create
	held      = stdio.Grants[grant]{}
	grants    int
)

type outcome int

const (
	done outcome = iota
	refused
	unavailable
	uncertain
)

// connect returns the bucket over a live connection, replacing a dead one (next server first).
func connect(ctx context.Context) (jetstream.KeyValue, error) {
	if nc != nil && nc.IsConnected() && kv != nil {
		return kv, nil
	}
	drop()
	var errs []error
	for range servers {
		url := "nats://" + servers[0]
		c, err := nats.Connect(url, nats.NoReconnect(), nats.Timeout(opTimeout),
			nats.Name("fencecheck-nats-go"))
		if err == nil {
			js, jerr := jetstream.New(c)
			if jerr == nil {
				b, berr := js.KeyValue(ctx, opts.Bucket)
				st, serr := js.Stream(ctx, "KV_"+opts.Bucket)
				if berr == nil && serr == nil {
					nc, kv, stream = c, b, st
					return kv, nil
				}
				jerr = errors.Join(berr, serr)
			}
			c.Close()
			err = jerr
		}
		errs = append(errs, fmt.Errorf("%s: %w", servers[0], err))
		rotate()
	}
	return nil, errors.Join(errs...)
}

func drop() {
	if nc != nil {
		nc.Close()
	}
	nc, kv, stream = nil, nil, nil
}

func rotate() { servers = append(servers[1:], servers[0]) }

// create is KeyValue.Create without its fallback on every error. nats.go's Create (v1.55.0,
// jetstream/kv.go) retries at a delete marker's revision after any failed first write, so a
// first write that timed out, and is stored after the retry's look at the key, would be
// answered by the retry's refusal: a grant reported as surely refused. Here only a refusal (the
// key holds a value or a marker) looks for a delete marker to write over.
func create(ctx context.Context, b jetstream.KeyValue, key string, value []byte) (uint64, error) {
	rev, err := b.Update(ctx, key, value, 0)
	var apiErr *jetstream.APIError
	if err == nil || !errors.As(err, &apiErr) || !wrongLast[apiErr.ErrorCode] {
		return rev, err
	}
	msg, gerr := stream.GetLastMsgForSubject(ctx, "$KV."+opts.Bucket+"."+key)
	if gerr != nil {
		return 0, err // the refusal stands: nothing of ours was stored
	}
	if op := msg.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return b.Update(ctx, key, value, msg.Sequence)
	}
	return 0, err
}

// write is one KV write ("create", "update" or "delete") and its revision, and how it ended.
func write(op, key string, value []byte, last uint64) (uint64, outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	b, err := connect(ctx)
	if err != nil {
		return 0, unavailable, err // nothing sent
	}
	var rev uint64
	switch op {
	case "create":
		rev, err = create(ctx, b, key, value)
	case "update":
		rev, err = b.Update(ctx, key, value, last)
	default:
		err = b.Delete(ctx, key, jetstream.LastRevision(last))
	}
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return rev, done, nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound),
		errors.Is(err, jetstream.ErrKeyDeleted):
		return 0, refused, err
	case errors.As(err, &apiErr) && wrongLast[apiErr.ErrorCode]:
		return 0, refused, err
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return 0, unavailable, err // no server had the subject: the message reached no one
	case errors.As(err, &apiErr):
		return 0, refused, err // another refusal of the stream leader
	}
	rotate() // the server that did not answer may be paused or cut off
	drop()
	return 0, uncertain, err
}

func tooLong(leaseMs int64) *reply {
	if opts.BucketTTLMs > 0 && leaseMs > opts.BucketTTLMs {
		return &reply{Status: "fail", Error: "lease-too-long"}
	}
	return nil
}

func acquire(req request, start time.Time) reply {
	if r := tooLong(req.LeaseMs); r != nil {
		return *r
	}
	grants++
	owner := []byte(fmt.Sprintf("go-%d-%d", os.Getpid(), grants))
	deadline := start.Add(time.Duration(req.TimeoutMs) * time.Millisecond)
	why := "held"
	for {
		attempt := time.Since(start).Nanoseconds()
		rev, how, err := write("create", req.Lock, owner, 0)
		switch how {
		case done:
			held[req.Lock] = grant{rev, owner}
			token := int64(rev)
			return reply{Status: "ok", Token: &token, AttemptNs: &attempt}
		case uncertain:
			return reply{Status: "info", Error: "create: " + err.Error()}
		case unavailable:
			why = "unavailable"
		case refused:
			why = "held"
		}
		left := time.Until(deadline)
		if left <= 0 { // the last attempt was at or after the deadline
			if why == "held" {
				return reply{Status: "fail", Error: "timeout"}
			}
			return reply{Status: "fail", Error: why}
		}
		time.Sleep(min(time.Duration(opts.PollMs)*time.Millisecond, left))
	}
}

func renew(req request, g grant) reply {
	if r := tooLong(req.LeaseMs); r != nil {
		return *r
	}
	rev, how, err := write("update", req.Lock, g.owner, g.revision)
	return answer(how, err, func() { held[req.Lock] = grant{rev, g.owner} })
}

func release(req request, g grant) reply {
	_, how, err := write("delete", req.Lock, nil, g.revision)
	return answer(how, err, func() {})
}

func answer(how outcome, err error, ok func()) reply {
	switch how {
	case done:
		ok()
		return reply{Status: "ok"}
	case refused:
		return reply{Status: "fail", Error: "lease-expired"}
	case unavailable:
		return reply{Status: "fail", Error: "unavailable"}
	}
	return reply{Status: "info", Error: err.Error()}
}

func main() {
	opTimeout = stdio.OpTimeout()
	stdio.Options(&opts)
	servers = stdio.Endpoints()
	n, _ := strconv.Atoi(os.Getenv("FENCECHECK_WORKER"))
	for i := 0; i < n%len(servers); i++ {
		rotate()
	}
	stdio.Program{Name: "nats-kv-client", Acquire: acquire, Renew: held.Renew(renew),
		Release: held.Release(release), Close: drop}.Run()
}
