"""Plain step adapters behind the KFP components: parse inputs, call factprobe, write outputs, log.

They never import kfp: inside a running component KFP exposes only the runtime part of `kfp.dsl`.
"""
