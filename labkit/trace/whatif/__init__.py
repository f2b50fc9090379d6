"""What-if replay: what a cheaper host call, a copy that does not synchronize or one not made would buy."""
