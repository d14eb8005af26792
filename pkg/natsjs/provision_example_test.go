package natsjs_test

import (
	"fmt"

	"github.com/offload-dev/offload/pkg/natsjs"
)

func ExampleNamesFor() {
	n := natsjs.NamesFor("acme")
	fmt.Println(n.Tasks, n.Results, n.Cancel, n.RegistryBucket, n.RegistryStream)
	// Output: ACME_TASKS ACME_RESULTS ACME_CANCEL acme_registry KV_acme_registry
}

func ExampleTaskConsumerConfig() {
	cfg, err := natsjs.TaskConsumerConfig("search", natsjs.ProvisionOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Durable, cfg.FilterSubject, cfg.AckPolicy, cfg.AckWait, cfg.MaxDeliver, cfg.BackOff)
	// Output: task_search tools.task.search AckExplicit 10s 20 [10s 10s 10s 30s 1m0s]
}

func ExampleExhaustedConsumerConfig() {
	cfg, err := natsjs.ExhaustedConsumerConfig("search", natsjs.ProvisionOptions{Prefix: "acme"})
	if err != nil {
		panic(err)
	}
	fmt.Println(natsjs.NamesFor("acme").Exhausted, cfg.Durable, cfg.FilterSubject, cfg.AckPolicy, cfg.MaxDeliver)
	// Output: ACME_EXHAUSTED exhausted_search $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ACME_TASKS.task_search AckExplicit -1
}
