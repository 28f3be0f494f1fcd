"""Upload compressors (`compression=`): wire transforms whose payloads are the exact bytes sent."""
