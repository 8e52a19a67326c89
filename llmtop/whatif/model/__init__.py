"""The what-if's model: window -> calibration -> virtual-time prediction -> words; pure."""
