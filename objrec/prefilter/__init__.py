"""Decision-tree region prefilter (see issue: RegionPrefilter)."""
