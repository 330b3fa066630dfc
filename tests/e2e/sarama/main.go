// A consumer-group client built on Debian's Sarama 1.22, which commits offsets with OffsetCommit
// v1 and reads them with OffsetFetch v1 (the versions Kafka 4 removed, KIP-896).
//
//	sarama-client consume BOOTSTRAP TOPIC GROUP COUNT TIMEOUT_S
//
// Joins GROUP, consumes TOPIC from the committed offsets (from the start where none is
// committed), prints each record as `partition offset value` on a line of its own and marks it
// consumed, until COUNT records are marked; then leaves the group, which commits the marked
// offsets. Exits 1 if COUNT records do not arrive within TIMEOUT_S seconds.
//
// SARAMA_KAFKA_VERSION (default 2.0.0) is the Kafka version Sarama assumes; SARAMA_SASL_USER and
// SARAMA_SASL_PASSWORD log in with SASL/PLAIN.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type handler struct {
	mu     sync.Mutex
	left   int
	cancel context.CancelFunc
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.mu.Lock()
		if h.left == 0 {
			h.mu.Unlock()
			return nil
		}
		fmt.Printf("%d %d %s\n", msg.Partition, msg.Offset, msg.Value)
		session.MarkMessage(msg, "")
		h.left--
		done := h.left == 0
		h.mu.Unlock()
		if done {
			h.cancel()
			return nil
		}
	}
	return nil
}

func main() {
	if len(os.Args) != 7 || os.Args[1] != "consume" {
		fmt.Fprintln(os.Stderr, "usage: sarama-client consume BOOTSTRAP TOPIC GROUP COUNT TIMEOUT_S")
		os.Exit(2)
	}
	bootstrap, topic, group := os.Args[2], os.Args[3], os.Args[4]
	count, err1 := strconv.Atoi(os.Args[5])
	timeout, err2 := strconv.Atoi(os.Args[6])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "COUNT and TIMEOUT_S are integers")
		os.Exit(2)
	}

	config := sarama.NewConfig()
	config.ClientID = "corral-e2e-sarama"
	config.Version = sarama.V2_0_0_0
	if v := os.Getenv("SARAMA_KAFKA_VERSION"); v != "" {
		version, err := sarama.ParseKafkaVersion(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "SARAMA_KAFKA_VERSION:", err)
			os.Exit(2)
		}
		config.Version = version
	}
	if user := os.Getenv("SARAMA_SASL_USER"); user != "" {
		// SASL/PLAIN: with a Kafka version before 1.0 Sarama sends SaslHandshake v0 and then the
		// token as a bare frame.
		config.Net.SASL.Enable = true
		config.Net.SASL.Handshake = true
		config.Net.SASL.User = user
		config.Net.SASL.Password = os.Getenv("SARAMA_SASL_PASSWORD")
	}
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	config.Consumer.Return.Errors = true

	consumerGroup, err := sarama.NewConsumerGroup([]string{bootstrap}, group, config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "new consumer group:", err)
		os.Exit(1)
	}
	go func() {
		for err := range consumerGroup.Errors() {
			fmt.Fprintln(os.Stderr, "consumer group error:", err)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeout)*time.Second)
	defer cancel()
	h := &handler{left: count, cancel: cancel}
	for ctx.Err() == nil {
		if err := consumerGroup.Consume(ctx, []string{topic}, h); err != nil {
			fmt.Fprintln(os.Stderr, "consume:", err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Leaving the group commits what was marked.
	if err := consumerGroup.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		os.Exit(1)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.left > 0 {
		fmt.Fprintf(os.Stderr, "%d of %d records did not arrive within %d s\n", h.left, count, timeout)
		os.Exit(1)
	}
}
