// franz-client: franz-go (kgo and kadm), driven by tests/e2e/test_franz_go.py. Every subcommand
// prints its outcome as JSON on stdout (one object, or one object per line for `member`); client
// logs go to stderr.
//
//	franz-client roundtrip -bootstrap B -topic T -partitions P -count N -group G -protocol classic|consumer [security]
//	    creates T, produces N records (acks=all, idempotent: franz-go's default), consumes them in
//	    group G (classic: the cooperative-sticky balancer; consumer: KIP-848, the server assigns),
//	    commits, describes the group and its lag with kadm while the member is in it, leaves, and
//	    reads the committed offsets, the end offsets and the group's listing back (-no-create: T
//	    exists, so it is not created). If a step fails
//	    it prints {"error": MESSAGE, "step": STEP} and exits 1.
//	franz-client member -bootstrap B -topic T -group G -protocol classic|consumer -name NAME [security]
//	    a group member that consumes, commits what it consumed after every poll, and prints events
//	    (assigned, revoked, lost, consumed, committed, error, closed) until stdin closes; then it
//	    commits, leaves the group and exits.
//
// Security flags: -tls-ca FILE (TLS, trusting that CA), -tls-cert FILE -tls-key FILE (a client
// certificate), -sasl PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 -user U -password P.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const timeout = 60 * time.Second

type options struct {
	bootstrap, topic, group, protocol, name string
	partitions, count                       int
	noCreate                                bool
	tlsCA, tlsCert, tlsKey                  string
	mechanism, user, password               string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: franz-client roundtrip|member FLAGS")
		os.Exit(2)
	}
	var o options
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&o.bootstrap, "bootstrap", "127.0.0.1:9092", "bootstrap server")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.group, "group", "", "consumer group")
	fs.StringVar(&o.protocol, "protocol", "classic", "group protocol: classic or consumer (KIP-848)")
	fs.StringVar(&o.name, "name", "franz", "client id")
	fs.IntVar(&o.partitions, "partitions", 3, "partitions of the topic created")
	fs.IntVar(&o.count, "count", 100, "records produced and consumed")
	fs.BoolVar(&o.noCreate, "no-create", false, "roundtrip: the topic exists, do not create it")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA file: connect with TLS")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM client certificate")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM client key")
	fs.StringVar(&o.mechanism, "sasl", "", "SASL mechanism")
	fs.StringVar(&o.user, "user", "", "SASL user")
	fs.StringVar(&o.password, "password", "", "SASL password")
	_ = fs.Parse(os.Args[2:])

	switch os.Args[1] {
	case "roundtrip":
		out, step, err := roundtrip(o)
		if err != nil {
			emit(map[string]any{"error": err.Error(), "step": step})
			os.Exit(1)
		}
		emit(out)
	case "member":
		member(o)
	default:
		fmt.Fprintln(os.Stderr, "unknown subcommand", os.Args[1])
		os.Exit(2)
	}
}

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(b, '\n'))
}

// clientOptions are the connection settings every client of a run shares.
func clientOptions(o options) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(o.bootstrap, ",")...),
		kgo.ClientID(o.name),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
	}
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", o.tlsCA)
		}
		config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if o.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
			if err != nil {
				return nil, err
			}
			config.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(config))
	}
	if o.mechanism != "" {
		var m sasl.Mechanism
		switch o.mechanism {
		case "PLAIN":
			m = plain.Auth{User: o.user, Pass: o.password}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: o.user, Pass: o.password}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: o.user, Pass: o.password}.AsSha512Mechanism()
		default:
			return nil, fmt.Errorf("unknown SASL mechanism %q", o.mechanism)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// groupOptions make a client a member of o.group consuming o.topic from its start.
func groupOptions(o options) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.ConsumerGroup(o.group),
		kgo.ConsumeTopics(o.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.HeartbeatInterval(time.Second),
		kgo.SessionTimeout(10 * time.Second),
		kgo.RebalanceTimeout(20 * time.Second),
	}
	if o.protocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	return opts
}

func partitionNames(m map[string][]int32) []string {
	names := []string{}
	for t, ps := range m {
		for _, p := range ps {
			names = append(names, t+"-"+strconv.Itoa(int(p)))
		}
	}
	sort.Strings(names)
	return names
}

func setNames(s kadm.TopicsSet) []string {
	names := []string{}
	s.Each(func(t string, p int32) { names = append(names, t+"-"+strconv.Itoa(int(p))) })
	sort.Strings(names)
	return names
}

func roundtrip(o options) (map[string]any, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	base, err := clientOptions(o)
	if err != nil {
		return nil, "options", err
	}
	admin, err := kgo.NewClient(base...)
	if err != nil {
		return nil, "client", err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)

	if !o.noCreate {
		if _, err := adm.CreateTopic(ctx, int32(o.partitions), -1, nil, o.topic); err != nil {
			return nil, "create-topic", err
		}
	}

	// Produce: every record acknowledged once, at offsets 0..n-1 of its partition.
	producer, err := kgo.NewClient(append(base, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(o.topic))...)
	if err != nil {
		return nil, "producer", err
	}
	records := make([]*kgo.Record, o.count)
	for i := range records {
		records[i] = &kgo.Record{Key: []byte("k-" + strconv.Itoa(i)), Value: []byte("v-" + strconv.Itoa(i))}
	}
	results := producer.ProduceSync(ctx, records...)
	producer.Close()
	if err := results.FirstErr(); err != nil {
		return nil, "produce", err
	}
	offsets := map[int32][]int64{}
	for _, r := range results {
		offsets[r.Record.Partition] = append(offsets[r.Record.Partition], r.Record.Offset)
	}
	produced := map[string]any{}
	for p, offs := range offsets {
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		dense := true
		for i, off := range offs {
			dense = dense && off == int64(i)
		}
		produced[strconv.Itoa(int(p))] = map[string]any{"count": len(offs), "dense_from_0": dense}
	}

	// Consume in the group until every record arrived, then commit.
	var mu sync.Mutex
	assignment := map[string][]int32{}
	opts := append(append([]kgo.Opt{}, base...), groupOptions(o)...)
	opts = append(opts, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		mu.Lock()
		defer mu.Unlock()
		for t, ps := range m {
			assignment[t] = append(assignment[t], ps...)
		}
	}))
	consumer, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, "consumer", err
	}
	defer consumer.Close()
	seen := map[string]int{}
	consumedTotal := 0
	for len(seen) < o.count {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, "consume", fmt.Errorf("%d of %d records consumed: %w", len(seen), o.count, ctx.Err())
		}
		var fetchErr error
		fetches.EachError(func(t string, p int32, err error) {
			if t == "" { // the group's error, not a partition's
				fetchErr = err
			} else {
				fetchErr = fmt.Errorf("fetch %s-%d: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return nil, "consume", fetchErr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			consumedTotal++
		})
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		return nil, "commit", err
	}
	mu.Lock()
	assigned := partitionNames(assignment)
	mu.Unlock()

	// While the member is in the group: describe it and its lag.
	described := map[string]any{}
	if o.protocol == "consumer" {
		groups, err := adm.DescribeConsumerGroups(ctx, o.group)
		if err != nil {
			return nil, "describe", err
		}
		g := groups[o.group]
		if g.Err != nil {
			return nil, "describe", g.Err
		}
		members := []map[string]any{}
		for _, m := range g.Members {
			members = append(members, map[string]any{
				"client_id": m.ClientID, "host": m.ClientHost, "epoch": m.MemberEpoch,
				"assignment": setNames(m.Assignment), "target": setNames(m.TargetAssignment),
				"subscribed": m.SubscribedTopics,
			})
		}
		described = map[string]any{"state": g.State, "assignor": g.AssignorName, "epoch": g.Epoch, "assignment_epoch": g.AssignmentEpoch, "members": members}
	} else {
		groups, err := adm.DescribeGroups(ctx, o.group)
		if err != nil {
			return nil, "describe", err
		}
		g := groups[o.group]
		if g.Err != nil {
			return nil, "describe", g.Err
		}
		members := []map[string]any{}
		for _, m := range g.Members {
			var parts []string
			if c, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range c.Topics {
					for _, p := range t.Partitions {
						parts = append(parts, t.Topic+"-"+strconv.Itoa(int(p)))
					}
				}
			}
			sort.Strings(parts)
			members = append(members, map[string]any{"client_id": m.ClientID, "host": m.ClientHost, "assignment": parts})
		}
		described = map[string]any{"state": g.State, "protocol_type": g.ProtocolType, "assignor": g.Protocol, "members": members}
	}
	// kadm's Lag describes the group with DescribeGroups, which Kafka answers for a KIP-848 group
	// with GROUP_ID_NOT_FOUND: its error is part of the outcome.
	lags, err := adm.Lag(ctx, o.group)
	if err != nil {
		return nil, "lag", err
	}
	var totalLag any
	if lag := lags[o.group]; lag.Error() != nil {
		totalLag = map[string]any{"error": lag.Error().Error()}
	} else {
		totalLag = lag.Lag.Total()
	}

	consumer.LeaveGroup()
	consumer.Close()

	// After leaving: the committed offsets, the end offsets and the group's listing.
	committed := map[string]int64{}
	fetched, err := adm.FetchOffsets(ctx, o.group)
	if err != nil {
		return nil, "fetch-offsets", err
	}
	if err := fetched.Error(); err != nil {
		return nil, "fetch-offsets", err
	}
	fetched.Each(func(r kadm.OffsetResponse) {
		committed[r.Topic+"-"+strconv.Itoa(int(r.Partition))] = r.At
	})
	ends := map[string]int64{}
	listedEnds, err := adm.ListEndOffsets(ctx, o.topic)
	if err != nil {
		return nil, "end-offsets", err
	}
	if err := listedEnds.Error(); err != nil {
		return nil, "end-offsets", err
	}
	listedEnds.Each(func(l kadm.ListedOffset) {
		ends[l.Topic+"-"+strconv.Itoa(int(l.Partition))] = l.Offset
	})
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, "list-groups", err
	}
	var listing map[string]any
	if l, ok := listed[o.group]; ok {
		listing = map[string]any{"state": l.State, "type": l.GroupType, "protocol_type": l.ProtocolType}
	}

	duplicates := 0
	for _, n := range seen {
		duplicates += n - 1
	}
	return map[string]any{
		"produced":    produced,
		"consumed":    map[string]any{"records": consumedTotal, "distinct": len(seen), "duplicates": duplicates, "assignment": assigned},
		"described":   described,
		"lag":         totalLag,
		"committed":   committed,
		"end_offsets": ends,
		"listed":      listing,
	}, "", nil
}

// member runs until stdin closes, printing what happens to it as a group member.
func member(o options) {
	base, err := clientOptions(o)
	if err != nil {
		emit(map[string]any{"event": "error", "error": err.Error()})
		os.Exit(1)
	}
	event := func(kind string, fields map[string]any) {
		fields["event"] = kind
		emit(fields)
	}
	opts := append(append([]kgo.Opt{}, base...), groupOptions(o)...)
	opts = append(opts,
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			event("assigned", map[string]any{"partitions": partitionNames(m)})
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			// What was consumed from the revoked partitions is committed before they go.
			err := cl.CommitUncommittedOffsets(ctx)
			event("revoked", map[string]any{"partitions": partitionNames(m), "commit_error": errString(err)})
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			event("lost", map[string]any{"partitions": partitionNames(m)})
		}),
	)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		event("error", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		stop()
	}()
	for ctx.Err() == nil {
		fetches := client.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				event("error", map[string]any{"partition": t + "-" + strconv.Itoa(int(p)), "error": err.Error()})
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			event("consumed", map[string]any{"partition": r.Topic + "-" + strconv.Itoa(int(r.Partition)), "offset": r.Offset, "value": string(r.Value)})
		})
		if fetches.NumRecords() > 0 {
			commitCtx, cancel := context.WithTimeout(context.Background(), timeout)
			err := client.CommitUncommittedOffsets(commitCtx)
			cancel()
			event("committed", map[string]any{"error": errString(err)})
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = client.CommitUncommittedOffsets(closeCtx)
	client.LeaveGroup()
	client.Close()
	event("closed", map[string]any{"commit_error": errString(err)})
}

func errString(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}
