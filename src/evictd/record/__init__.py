"""What evictd writes down about its cycles and reads back: the flight recorder and its recording format,
replay, explain, and the engine state that survives a restart."""
