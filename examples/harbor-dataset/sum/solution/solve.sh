#!/bin/bash
echo 5 > answer.txt
