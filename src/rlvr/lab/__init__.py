"""The lab: findings (claims about RL methods, as data) run as arms x seeds on the lab task and model, with 95%
intervals and a verdict (docs/lab.md, docs/findings.md)."""
