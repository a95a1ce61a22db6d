kind = "release-policy"
colour = "blue"
