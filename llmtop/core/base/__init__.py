"""What every home shares: the types one poll passes on, and the words they are printed in."""
