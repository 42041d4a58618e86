"""The API's vocabulary and the DeadlineTrainingJob spec as the operator reads it: names and types only."""
