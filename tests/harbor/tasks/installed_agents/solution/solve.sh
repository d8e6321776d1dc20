#!/bin/bash
echo 'hello from harbor' > /app/hello.txt
