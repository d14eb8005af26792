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
	limit, _ := natsjs.DeliveryLimit(cfg)
	fmt.Println(cfg.Durable, cfg.FilterSubject, cfg.AckPolicy, cfg.AckWait, cfg.MaxDeliver, limit, cfg.BackOff)
	// Output: task_search tools.task.search AckExplicit 10s -1 20 [10s 10s 10s 30s 1m0s]
}
