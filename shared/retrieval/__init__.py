"""The read path: candidates, expansion over waypoints, scoring, selection, one module per stage."""
