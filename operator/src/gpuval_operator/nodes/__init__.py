"""The nodes a GpuValidation selects: followed by one watch (watch) and kept as facts (facts), the
gating decision (gating), every validation's entry on a node and what follows for the node
(entries, pure), and the node actions that apply it (actor)."""
