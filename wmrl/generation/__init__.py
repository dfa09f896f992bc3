"""Text generation behind one interface: ``transformers`` (CPU, GPU fallback) and ``vllm`` (clusters)."""
