package workload

// Scenario is a named workload profile with service-level objectives.
// STUB: the workload owner fills this in.
type Scenario struct {
	Name string
}
