"""The closed forms every stage reads: the byte model's bytes and FLOPs, derived from per-step
lists of the reads and writes that cross the slow-memory boundary (`forward`, `backward`;
`decode`: a few new tokens against a KV cache), and theory 02's practice problems computed from
them (`theory`). Stage 1 (`minimodel.symbolic`) writes them as tables; the other stages set their
measurements beside them.
"""
