"""Terminal tables and Markdown: summary, collectives, stragglers, NCCL logs, comparisons."""
