"""Prometheus: its HTTP API read a page of time at a time (:mod:`.api`), and vLLM's series in it (:mod:`.vllm`):
load evidence, each engine's running KV value, and the alert rules of an approved launch.
"""
