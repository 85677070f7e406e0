"""What evictd writes down about its cycles and reads back: the flight recorder and its recording format, the
engine state that survives a restart, and the write-behind thread that keeps those writes off the loop."""
