"""The nodes a GpuValidation selects: followed by one watch (watch) and kept as facts (facts), the
gating decision (gating), every validation's entry on a node and what follows for the node
(entries, pure), the node actions that apply it (actor), and the circuit breaker they ask
first (breaker: its rules and the operator-wide count)."""
